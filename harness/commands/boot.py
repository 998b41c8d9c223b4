"""``harness boot``: boot a guest and leave its gdb and QMP sockets open (or run gdb on it)."""

from __future__ import annotations

import json
import shlex
import signal
import site
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EXIT_OK
from . import UsageError, arg, command
from ._guest import GUEST_ARGS, LIB_ARG, shell_spec

if TYPE_CHECKING:  # the module itself is imported where it is used (commands/__init__.py)
    from ..interactive import Guest

__all__ = ["write_gdb_session"]


def write_gdb_session(sess, started: dict | None = None, maps: dict | None = None):
    """``session.json`` and the gdb loader ``harness-gdb.py`` in the guest's work directory
    (:mod:`harness.gdbext`); returns the loader's path."""
    from ..images.symfile import kernel_symbol_file
    from ..session import kallsyms_path
    m = sess.machine
    symfile = kernel_symbol_file(sess.symbols, sess.kernel.sha256)
    cfg = {
        "release": m.release, "kernel_name": sess.spec.kernel, "vmlinux": str(sess.kernel.vmlinux),
        "kallsyms": str(kallsyms_path(sess.kernel)), "symfile": str(symfile),
        "gdb_socket": str(m.gdb_socket),
        "programs": [{"name": p.name, "toolchain": p.toolchain, "variant": p.variant.tag, "path": str(p.path),
                      "runtime": [[str(h), g] for h, g in p.runtime]} for p in sess.programs.values()],
        "started": {str(k): v for k, v in (started or {}).items()},
        "maps": {str(k): v for k, v in (maps or {}).items()},
    }
    (m.workdir / "session.json").write_text(json.dumps(cfg, indent=1))
    repo = Path(__file__).resolve().parent.parent.parent
    paths = [str(repo), *site.getsitepackages()]
    loader = m.workdir / "harness-gdb.py"
    loader.write_text(
        "# gdb -x THIS: the harness's gdb extension (harness/gdbext.py) for this guest\n"
        "import sys\n"
        f"sys.path[0:0] = [p for p in {paths!r} if p not in sys.path]\n"
        "import harness.gdbext\n"
        f"harness.gdbext.setup({str(m.workdir / 'session.json')!r})\n")
    return loader


def _gdb_command(loader, socket) -> list[str]:
    return ["gdb", "-q", "-ex", "set architecture i386:x86-64", "-x", str(loader),
            "-ex", f"target remote | socat STDIO UNIX-CONNECT:{socket}"]


# How long --gdb --start waits for the started program to be running in user mode.
USER_MODE_WAIT = 10.0


def _stop_in_user_mode(g: Guest, pid: int) -> bool:
    """Stop the guest where ``pid`` (the last ``--start`` program) runs in user mode, for gdb to
    attach there: its first stop, ``user-bt`` and ``$pc`` are the program's, as when gdb attaches
    to a process.  Else (it exited, or does not run within the bound: it sleeps) says so and
    returns False: gdb attaches wherever the guest is then."""
    try:
        where = g.until_user(pid, timeout=USER_MODE_WAIT)
    except (LookupError, TimeoutError) as exc:
        print(f"[harness: {exc}: gdb attaches wherever the guest is]", flush=True)
        return False
    print(f"[harness: {where}]", flush=True)
    return True


@command("boot", help="boot a guest and leave gdb and QMP sockets open", args=[
    *GUEST_ARGS,
    arg("--gdb", action="store_true",
        help="run gdb attached to the guest, with kernel symbols and the harness's commands"),
    arg("--batch", action="store_true", help="with --gdb: run the -ex commands and exit"),
    arg("-ex", dest="ex", action="append", metavar="CMD", help="with --gdb: a gdb command (repeatable)"),
    arg("--start", action="append", metavar="SCENARIO|PATH",
        help="start this program before gdb attaches (a catalog scenario's, a guest path or a --program; "
             "repeatable); with --gdb, gdb attaches where the last one runs in user mode"),
    arg("--scenario", action="append", help="also put this scenario's program in the guest"),
    arg("--program", action="append", metavar="PATH", help="also put this host binary in the guest"),
    LIB_ARG,
])
def cmd_boot(args) -> int:
    from ..interactive import Guest
    from ..session import Session
    if (args.batch or args.ex) and not args.gdb:
        raise UsageError("--batch and -ex go with --gdb")
    sess = Session(shell_spec(args)).start()
    m = sess.machine
    try:
        started, maps = {}, {}
        hand_over_stopped = False
        if args.start:
            g = Guest(sess)
            for what in args.start:
                p = g.start(what)
                started[p.pid] = list(p.argv)
                maps[p.pid] = g.maps(p.pid)
                if args.gdb:  # said before gdb's own output (the other mode lists them with the sockets)
                    print(f"started pid {p.pid}: {' '.join(p.argv)}", flush=True)
            if args.gdb:
                hand_over_stopped = _stop_in_user_mode(g, p.pid)
        loader = write_gdb_session(sess, started, maps)
        # The session's own debugger connection is released so that gdb can attach: detached (the
        # guest runs until gdb's connection stops it, wherever it is then), or dropped with the
        # guest left stopped where the started program runs, for gdb to find it there.
        sess.target.close(detach=not hand_over_stopped)
        sess.target = None
        gdb_cmd = _gdb_command(loader, m.gdb_socket)
        if args.gdb:
            cmd = gdb_cmd + [x for ex in (args.ex or []) for x in ("-ex", ex)] + (["-batch"] if args.batch else [])
            print(f"guest up in {m.boot_seconds:.1f}s ({sess.accel}), {m.release}; {shlex.join(cmd)}", flush=True)
            old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is gdb's
            try:
                return subprocess.call(cmd, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
            finally:
                signal.signal(signal.SIGINT, old)
        print(json.dumps(sess.describe(), indent=1))
        print(f"\nguest up in {m.boot_seconds:.1f}s ({sess.accel}); QEMU pid {m.pid}; QMP: {m.qmp_socket}")
        print("attach with (kernel symbols and the commands tasks, user-bt [PID], deferred [PID] loaded):")
        print(f"  {shlex.join(gdb_cmd)}")
        print("or bare:")
        print(f"  gdb -ex 'set architecture i386:x86-64' -ex 'target remote | socat STDIO UNIX-CONNECT:{m.gdb_socket}'")
        print("programs in the guest:", ", ".join(sess.programs) or "none")
        for pid, argv in started.items():
            print(f"started pid {pid}: {' '.join(argv)}")
        print("Ctrl-C (or SIGTERM) shuts the guest down.", flush=True)
        stop = []
        signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
        try:
            while not stop and m.alive():
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        return EXIT_OK
    finally:
        sess.close()
