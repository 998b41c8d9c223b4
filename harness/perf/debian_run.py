"""Running Debian's own perf in a booted guest and bringing its files back (orchestration).

One run, in the guest (``/debperf/run-perf``: :mod:`harness.images.debperf`)::

    run-perf record -e cpu-clock -F FREQ --call-graph fp,defer --user-regs=ax,...,r15 \\
        -o /tmp/perf.data -- PERFCC -d ... -o /tmp/perfcc.out -s SECONDS -- PROGRAM ARGS...
    run-perf evlist -v -i /tmp/perf.data            must show "defer_callchain: 1"
    run-perf script --no-inline -F FIELDS --max-stack 1024 -i /tmp/perf.data            (merged)
    run-perf script --no-merge-callchains --no-inline -F FIELDS --max-stack 1024 ...    (unmerged)

perfcc (``guest_programs/perfcc.c``) is perf record's workload: it runs the program for SECONDS and
samples it itself with registers, stack bytes and ``defer_callchain``, which gives our unwinder
what perf's fp,defer samples lack (:mod:`.debian` says why).  ``--no-inline``: perf script would
otherwise run ``addr2line`` (binutils, not in the guest) for inlined frames and die of SIGPIPE
(measured: exit 141).  ``--max-stack 1024``: perf script cuts printed chains at
``kernel.perf_event_max_stack`` (127) by default; the deferred chains go to 510 entries.
A perf or kernel that does not honour ``fp,defer`` silently records without it (perf switches
the bit off when the kernel refuses it): the evlist check turns that into :class:`DeferIgnored`.

Files come back through the ``/init`` dump port, gzipped in the guest (busybox gzip).
"""

from __future__ import annotations

import gzip
import json
import re
import shlex
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import EXIT_USAGE, HarnessError
from ..images.debperf import GUEST_PERF
from ..images.programs import Program, program_facts
from ..perfparse.perfdata import parse_perf_data
from ..perfparse.records import parse_capture
from ..perfparse.script import parse_script
from ..progress import step
from ..session import Session
from .capture import PERFCC, PerfSpec, _guest_running, resolver
from .debian import DebianReport, compare
from .oracle import capture_facts

__all__ = ["DebianFiles", "DebianFilesError", "DeferIgnored", "DebianRunError", "FILES", "deferred_unsupported",
           "run_debian_perf", "check_files"]

SCRIPT_FIELDS = "comm,pid,tid,time,event,period,ip,sym,symoff,dso"
#: every user register perf can sample on x86-64 (``perf record --user-regs=?``): ip, sp and bp to
#: compare with perfcc's sample of the same entry, the rest to prove a sample in execve
USER_REGS = "ax,bx,cx,dx,si,di,bp,sp,ip,flags,cs,ss,r8,r9,r10,r11,r12,r13,r14,r15"
MAX_STACK = 1024
#: the files of one run, by role: what --save writes and --check reads
FILES = {"perf_data": "perf.data", "evlist": "evlist.txt", "merged": "script-merged.txt",
         "unmerged": "script-unmerged.txt", "perfcc": "perfcc.out", "record_log": "record.log"}


class DebianRunError(HarnessError):
    """perf record, evlist or script failed in the guest, or a file did not come back."""


class DebianFilesError(HarnessError):
    """A saved run directory (``--save DIR``) that lacks a file ``--check DIR`` needs."""

    exit_code = EXIT_USAGE  # bad input


class DeferIgnored(HarnessError):
    """``perf evlist -v`` does not show ``defer_callchain: 1``: this perf (or kernel) recorded
    without deferred callchains although ``--call-graph fp,defer`` asked for them."""

    exit_code = EXIT_USAGE  # what was given (this perf, this kernel) cannot do what was asked


def deferred_unsupported(version: str) -> str | None:
    """Why a kernel of this version (``6.1.176-1``, ``7.3.4+deb13-cloud-amd64``) cannot be
    checked with perf's deferred callchains, or None: unwind_deferred came in 6.17, perf's
    ``defer_callchain`` (the user of it) in 6.19."""
    m = re.match(r"(\d+)\.(\d+)", version)
    if not m:
        return f"kernel version {version!r} not understood"
    v = (int(m[1]), int(m[2]))
    if v < (6, 17):
        return (f"kernel {version} has no deferred unwinding (unwind_deferred came in 6.17, perf's "
                f"defer_callchain in 6.19)")
    if v < (6, 19):
        return f"kernel {version} has unwind_deferred but no perf defer_callchain (6.19)"
    return None


@dataclass
class DebianFiles:
    """What one run brings back (text as perf printed it, binary files as written)."""

    perf_data: bytes
    evlist: str
    merged: str
    unmerged: str
    perfcc: bytes | None
    record_log: str = ""

    def save(self, directory: Path, program: Program | None = None) -> None:
        """Write the files; with ``program``, also ``resolve.json`` (its guest paths -> host
        files), which the causes need to read its ELF files when ``--check`` re-checks them."""
        directory.mkdir(parents=True, exist_ok=True)
        if program is not None:
            table = {program.guest_path: str(program.path), **{g: str(h) for h, g in program.runtime}}
            (directory / "resolve.json").write_text(json.dumps(table, indent=1))
        for role, name in FILES.items():
            value = getattr(self, role)
            if value is None:
                continue
            (directory / name).write_bytes(value if isinstance(value, bytes) else value.encode())

    @classmethod
    def load(cls, directory: Path) -> DebianFiles:
        def read(role: str, text: bool):
            p = directory / FILES[role]
            if not p.exists():
                return None
            return p.read_text() if text else p.read_bytes()

        missing = [FILES[r] for r in ("perf_data", "evlist", "merged", "unmerged")
                   if not (directory / FILES[r]).exists()]
        if missing:
            raise DebianFilesError(f"{directory}: missing {', '.join(missing)} (a directory of harness perf "
                                   f"--debian-perf --save DIR)")
        return cls(read("perf_data", False), read("evlist", True), read("merged", True), read("unmerged", True),
                   read("perfcc", False), read("record_log", True) or "")


def check_defer(evlist: str) -> None:
    """Every event line of ``perf evlist -v`` must carry ``defer_callchain: 1``."""
    events = [ln for ln in evlist.splitlines() if re.match(r"^\S+: type: ", ln)]
    if not events:
        raise DeferIgnored(f"perf evlist -v printed no event: {evlist.strip()[:300]!r}")
    lacking = [ln.split(":", 1)[0] for ln in events if not re.search(r"\bdefer_callchain: 1\b", ln)]
    if lacking:
        raise DeferIgnored(f"perf evlist -v shows no 'defer_callchain: 1' for {', '.join(lacking)}: this perf or "
                           f"kernel recorded without deferred callchains although fp,defer was asked for")


def check_files(files: DebianFiles, resolve=None, program_facts: frozenset[str] | None = None) -> DebianReport:
    """Parse and compare (no guest): the report of :func:`harness.perf.debian.compare`; with the
    target program's facts, its named differences against the run's declaration."""
    check_defer(files.evlist)
    data = parse_perf_data(files.perf_data)
    cc = parse_capture(files.perfcc) if files.perfcc else None
    # perf record execs perfcc, which forks and execs the target; fp,defer
    r = compare(data, parse_script(files.merged), parse_script(files.unmerged), cc, resolve,
                capture_facts(program_facts, defer=True))
    m = re.search(r"perf version (\S+)", files.record_log)
    r.perf_version = m.group(1) if m else ""
    if cc is not None:
        r.release = cc.info.get("release", "")
    return r


def _sh(session: Session, cmd: str, what: str, timeout: float) -> None:
    status, out = session.machine.shell_output(cmd, timeout=timeout)
    if status != 0:  # the command's own output, from the program-output channel (its last lines)
        tail = "\n".join(out.decode(errors="replace").splitlines()[-15:])
        raise DebianRunError(f"{what} exited with status {status} in the guest ({cmd}):\n{tail}")


def _fetch(session: Session, path: str) -> bytes:
    m = session.machine
    try:
        _sh(session, f"gzip -1 -c {path} > {path}.gz", f"gzip {path}", 120)
    except DebianRunError as exc:
        # Seen once (campaign run s3, 2026-12-06): status 1 and not a word on stderr.  What the
        # guest's /tmp held then is the evidence: the file, the partial .gz, the space and memory.
        _status, out = m.shell_output(f"ls -l {path} {path}.gz; df /tmp; free", timeout=30)
        raise DebianRunError(f"{exc}\nthe guest then:\n{out.decode(errors='replace')}") from exc
    try:
        return gzip.decompress(m.dump(f"{path}.gz"))
    except (OSError, EOFError, zlib.error) as exc:
        raise DebianRunError(f"{path} came back corrupt: {exc}") from exc
    finally:
        m.shell(f"rm -f {path}.gz", timeout=30)


def run_debian_perf(session: Session, program: Program, args: list[str], seconds: float = 3.0,
                    freq: int = 200) -> DebianFiles:
    """perf record (fp,defer) of ``program`` under perfcc, evlist, perf script twice; the files."""
    perfcc = session.program(*PERFCC)
    spec = PerfSpec(seconds=seconds, freq=freq, defer=True)
    inner = shlex.join(spec.argv(perfcc.guest_path, "/tmp/perfcc.out", [program.guest_path, *args]))
    P = GUEST_PERF
    with _guest_running(session), step("perf", f"Debian perf record of {program.guest_path} for {seconds:g}s") as st:
        _sh(session, f"cd /tmp && {P} --version > /tmp/record.log 2>&1 && {P} record -e cpu-clock -F {freq} "
                     f"--call-graph fp,defer --user-regs={USER_REGS} -o /tmp/perf.data -- {inner} "
                     ">> /tmp/record.log 2>&1",
            "perf record", seconds + 120)
        _sh(session, f"{P} evlist -v -i /tmp/perf.data > /tmp/evlist.txt 2>&1", "perf evlist -v", 60)
        common = f"--no-inline -F {SCRIPT_FIELDS} --max-stack {MAX_STACK} -i /tmp/perf.data"
        st.update("perf script, merged and --no-merge-callchains")
        _sh(session, f"HOME=/tmp {P} script {common} > /tmp/script-merged.txt 2>/tmp/script.err", "perf script", 600)
        _sh(session, f"HOME=/tmp {P} script --no-merge-callchains {common} > /tmp/script-unmerged.txt "
                     f"2>>/tmp/script.err", "perf script --no-merge-callchains", 600)
        st.update("copying perf.data, the script texts and perfcc's capture to the host")
        files = DebianFiles(
            perf_data=_fetch(session, "/tmp/perf.data"),
            evlist=_fetch(session, "/tmp/evlist.txt").decode(errors="replace"),
            merged=_fetch(session, "/tmp/script-merged.txt").decode(errors="replace"),
            unmerged=_fetch(session, "/tmp/script-unmerged.txt").decode(errors="replace"),
            perfcc=_fetch(session, "/tmp/perfcc.out"),
            record_log=_fetch(session, "/tmp/record.log").decode(errors="replace"),
        )
        session.machine.shell("rm -f /tmp/perf.data /tmp/perfcc.out /tmp/script-*.txt /tmp/evlist.txt", timeout=30)
        st.end(f"Debian perf: {len(files.perf_data) / 1e3:.0f} kB perf.data, "
               f"{files.merged.count(chr(10)) + files.unmerged.count(chr(10))} lines of perf script "
               f"in {st.elapsed:.1f}s")
    return files


def check_run(files: DebianFiles, program: Program) -> DebianReport:

    return check_files(files, resolver([program]), program_facts(program.name, program.toolchain))
