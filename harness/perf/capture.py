"""Running ``guest_programs/perfcc.c`` in a booted guest and fetching its capture file.

This is orchestration (it drives a :class:`~harness.session.Session`); the parser
(:mod:`harness.perfparse.records`) and the oracle (:mod:`.oracle`) never see the guest.  The guest must run while
perfcc samples: a debugger that holds it stopped is resumed for the run and the guest is stopped
again afterwards.  The file comes back through the ``/init`` dump port, gzipped in the guest first
(busybox gzip): the stack dumps compress about 30 times, and the port moves ~0.5 MB/s under TCG.
"""

from __future__ import annotations

import contextlib
import gzip
import zlib

from ..errors import HarnessError
from ..images.programs import Program, Variant, program_facts
from ..perfparse.records import parse_capture
from ..progress import step
from ..session import Session
from ..unwind.maps import Resolver
from .oracle import PerfReport, check_capture
from .spec import PerfSpec

PERFCC = ("perfcc", "host", Variant())  # (source, toolchain, variant) for GuestSpec.programs
GUEST_OUT = "/tmp/perfcc.out"


class CaptureError(HarnessError):
    """perfcc failed in the guest, or its file did not come back; carries the console's tail."""


@contextlib.contextmanager
def _guest_running(session: Session):
    """The guest runs inside; a debugger that had it stopped stops it again after."""
    stopped = session.target is not None and not session.target.running
    if stopped:
        session.target.resume()
    try:
        yield
    finally:
        if stopped:
            session.target.interrupt()


def capture(session: Session, target: list[str], spec: PerfSpec = PerfSpec(), out: str = GUEST_OUT) -> bytes:
    """Run ``target`` (guest argv) under perfcc and return the capture file's bytes."""
    perfcc = session.program(*PERFCC)
    m = session.machine
    with _guest_running(session), step("perf", f"sampling {target[0]} for {spec.seconds:g}s at {spec.freq} Hz") as st:
        proc = m.run(spec.argv(perfcc.guest_path, out, target))
        status = m.wait_exit(proc, timeout=spec.seconds + 60)
        if status != 0:
            # perfcc's stderr is in its output file (the program-output channel), not on the console.
            m.output_done(proc, timeout=5)
            said = (proc.output.read_bytes()[-2000:].decode(errors="replace")
                    if proc.output and proc.output.exists() else "")
            raise CaptureError(f"perfcc exited with status {status}:\n{said}")
        st.update(f"copying the capture of {target[0]} to the host")
        packed = m.shell(f"gzip -1 -c {out} > {out}.gz", timeout=60) == 0
        try:
            data = m.dump(f"{out}.gz" if packed else out)
            if packed:
                data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise CaptureError(f"the capture came back corrupt: {exc}") from exc
        finally:
            m.shell(f"rm -f {out} {out}.gz", timeout=30)
        st.end(f"sampled {target[0]}: a {len(data) / 1e6:.1f} MB capture in {st.elapsed:.1f}s")
    if not data:
        raise CaptureError(f"{out} came back empty:\n" + "\n".join(m.console.tail(15)))
    return data


def resolver(programs: list[Program]) -> Resolver:
    """Guest paths of the programs (and their libraries) -> the host files they were copied from."""
    table: dict[str, str] = {}
    for p in programs:
        table[p.guest_path] = str(p.path)
        table.update({guest: str(host) for host, guest in p.runtime})
    return table.get


def run_perf(session: Session, program: Program, args: list[str],
             spec: PerfSpec = PerfSpec()) -> tuple[bytes, PerfReport]:
    """Capture ``program`` under perfcc and check every sample against the capture's declaration:
    (the capture, the report)."""
    data = capture(session, [program.guest_path, *args], spec)
    return data, check_capture(parse_capture(data), resolver([program]), program_facts(program.name, program.toolchain))
