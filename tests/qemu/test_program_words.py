"""A program's path and arguments reach it in the guest as given, byte for byte: ``harness run
--program`` with a binary whose file name holds a space and shell characters, and ``--args``
holding spaces, quotes, ``$``, a backquote, ``;``, ``*``, newlines and an empty word (issue 34:
they were split by /init's ``set -- $rest``, "/init: line 89: /user/my: not found", status 127,
and the program was blamed).  The program prints its argv in hex on its output, which the run
keeps beside its log; and the control line at the guest tty's bound arrives whole."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.session import GuestSpec
from harness.transport.channels import CONTROL_LINE_MAX, control_line

pytestmark = pytest.mark.qemu

GUEST = GuestSpec()  # the default guest (busybox is all the second test runs)
POOL_GUESTS = [GUEST]  # from the worker's pool (tests/conftest.py)

HARNESS = [sys.executable, "-c", "import sys; from harness.cli import main; sys.exit(main())"]

ARGV_C = r"""
#include <stdio.h>
static volatile unsigned long sink;
__attribute__((noinline)) void leaf(void) { for (int i = 0; i < 1000; i++) sink += i; }
__attribute__((noinline)) void mid(void) { leaf(); __asm__ volatile("" ::: "memory"); }
int main(int argc, char **argv)
{
	for (int i = 0; i < argc; i++) {
		fputs("ARG ", stdout);
		for (const unsigned char *p = (const unsigned char *)argv[i]; *p; p++)
			printf("%02x", *p);
		putchar('\n');
	}
	puts("END");
	fflush(stdout);
	for (;;)
		mid();
}
"""

NAME = "my prog $x;'q`*"  # the binary's file name: it is /user/NAME in the guest
ARGS = ["a b", "  two  spaces  ", "$HOME", "$(id)", "'single'", '"double"', "`id`", "x;y", "*", "/*",
        "line1\nline2", "\n", "", "back\\slash", "\\x41", "%s", "-n", "é"]


def argv_printed(data: bytes) -> list[bytes]:
    lines = data.decode().splitlines()
    assert "END" in lines, data[-500:]
    return [bytes.fromhex(ln[4:]) for ln in lines[:lines.index("END")] if ln.startswith("ARG ")]


def test_run_program_path_and_args_reach_the_program_unchanged(tmp_path):
    d = tmp_path / "dir with space"
    d.mkdir()
    (d / "argv.c").write_text(ARGV_C)
    binary = d / NAME
    subprocess.run(["gcc", "-O1", "-fno-omit-frame-pointer", "-static", "-o", str(binary), str(d / "argv.c")],
                   check=True, timeout=120)
    out = tmp_path / "run"
    p = subprocess.run([*HARNESS, "run", "--samples", "5", "--out", str(out), "--program", str(binary),
                        "--args", *ARGS], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    (sc,) = summary["scenarios"]
    log = out / sc["log"]
    end = json.loads(log.read_text().splitlines()[-1])
    assert end["ev"] == "end" and end["reason"] == "complete" and not end["errors"], end
    printed = argv_printed((out / end["program_output"]).read_bytes())
    assert printed == [f"/user/{NAME}".encode(), *(a.encode() for a in ARGS)]
    assert sc["stacks"] >= 5


@pytest.mark.pool_guest(GUEST)
def test_a_line_at_the_ttys_bound_arrives_whole(guest_pool, tmp_path):
    """A run line of exactly CONTROL_LINE_MAX bytes (the guest's canonical tty holds 4096 with
    the newline): busybox's printf in the guest prints each word it got, NUL-terminated."""
    head = ["/bin/busybox", "sh", "-c", 'printf "%s\\0" "$@"', "sh", "a b;*"]
    with guest_pool.take(GUEST) as sess:
        m = sess.machine
        ident = m._next_id + 1  # the id run() gives the line: its digits count
        fill = CONTROL_LINE_MAX - len(control_line("run", ident, words=head)) - 1
        words = [*head, "y" * fill]
        assert len(control_line("run", ident, words=words)) == CONTROL_LINE_MAX
        sess.target.resume()
        try:
            proc = m.run(words, output=tmp_path / "bound.out")
            assert proc.id == ident
            assert m.wait_exit(proc, 60) == 0
            assert m.output_done(proc, 10)
        finally:
            sess.target.interrupt()  # stopped, as it was taken (tests/conftest.py's pool)
    assert (tmp_path / "bound.out").read_bytes() == b"a b;*\0" + b"y" * fill + b"\0"
