"""images/init.sh's ``sh`` command under a SIGCHLD: its command line run by the busybox that goes
into the initramfs, with the output FIFO's reader late and a child of the shell ending meanwhile.

The flake campaign at be4d967 saw ``guest.sh("true")`` answer status 1 right after a ``kill``
(tests/qemu/test_shell.py, bookworm, once in three runs).  The cause: busybox ash opens a simple
command's redirections itself, before it forks; the open of the FIFO waits for its reader; the
killed program's subshell, a child of /init, ends meanwhile; its SIGCHLD interrupts the open,
which ash does not retry, and the command never runs."""

from __future__ import annotations

import os
import re
import subprocess

from harness.images.initramfs import BUSYBOX, INIT_SCRIPT
from tests.support.gating import require


def sh_command_line() -> str:
    """The line of init.sh's ``sh`` case that runs the host's command (``$w_1``)."""
    m = re.search(r"^    sh\)\n(.*?)^      ;;\n", INIT_SCRIPT.read_text(), re.S | re.M)
    assert m, "images/init.sh has no sh) case"
    (line,) = [x.strip() for x in m.group(1).splitlines() if 'sh -c "$w_1"' in x]
    return line


def run_with_a_late_reader(line: str, command: str, tmp_path) -> tuple[str, str, str]:
    """``line`` as /init runs it, its output FIFO's reader 1 s late and a child of the shell
    ending after 0.1 s, while the line waits for that reader: (the status, what the reader got,
    the shell's stderr)."""
    require(BUSYBOX.exists(), f"{BUSYBOX} is missing (busybox-static)")
    ident = f"t{os.getpid()}"
    fifo, got = f"/tmp/.out.{ident}", tmp_path / "got"
    script = (f'id={ident}\nw_1="$CMD"\nrm -f {fifo}\nmkfifo {fifo}\n'
              f'( sleep 1; cat {fifo} > "$GOT" ) &\n'
              '( sleep 0.1 ) &\n'
              # the FIFO gone once the line is done: a reader not yet in finds no FIFO, not a
              # writer that never comes
              f'{line}\nstatus=$?\nrm -f {fifo}\necho "$status"\nwait\n')
    r = subprocess.run([str(BUSYBOX), "sh", "-c", script], env={"CMD": command, "GOT": str(got), "PATH": "/bin:/usr/bin"},
                       capture_output=True, text=True, timeout=30)
    return r.stdout.strip(), got.read_text() if got.exists() else "", r.stderr


def test_the_sh_command_runs_and_answers_its_status_through_a_sigchld(tmp_path):
    status, out, err = run_with_a_late_reader(sh_command_line(), "echo hello; exit 3", tmp_path)
    assert (status, out, err) == ("3", "hello\n", "")
    status, out, err = run_with_a_late_reader(sh_command_line(), "true", tmp_path)
    assert (status, out, err) == ("0", "", "")


def test_the_old_line_lost_its_command_to_the_sigchld(tmp_path):
    """The line as it was: the redirection in /init itself.  On this busybox the open is
    interrupted and the command is lost, with status 1 (what the flake campaign saw)."""
    old = 'sh -c "$w_1" </dev/null >/tmp/.out.$id 2>&1 3>&- 4>&-'
    status, out, err = run_with_a_late_reader(old, "echo hello; exit 3", tmp_path)
    assert status == "1" and out == "" and "Interrupted system call" in err, (status, out, err)
