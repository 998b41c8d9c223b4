"""Debian's own perf (``linux-perf``) for the guest, from the same suite as the guest kernel.

Which package: ``linux-perf`` of the suite the kernel came from (:data:`harness.images.kernel.KERNELS`),
the newest version that suite itself offers (for the default kernel, trixie-backports: the perf
built from the same source upload as the kernel).

How it is obtained, and why this way: as for the backports QEMU (:mod:`harness.images.qemu`), apt
resolves the package's whole dependency closure against an empty dpkg status
(:meth:`~harness.images.apt.PrivateApt.download_closure`: ``-t SUITE --no-install-recommends``,
other suites pinned away) and every ``.deb`` is unpacked with ``dpkg-deb -x`` into a private root.
The guest is an initramfs with a static busybox and no glibc of its own, so only what the perf
binary loads goes into it: its ``PT_INTERP`` and ``DT_NEEDED`` closure, found in the root
(:func:`harness.images.programs.runtime_files`, the same walk our dynamic guest programs use), is
copied under :data:`GUEST_DIR` and perf runs through that loader (``ld-linux-x86-64.so.2
--library-path GUEST_DIR/lib GUEST_DIR/perf``) from a two-line wrapper script, :data:`GUEST_PERF`.
No library lands at a standard path, so a ``--program`` binary's own glibc (copied from this
machine to ``/lib/x86_64-linux-gnu``) never meets perf's.  perl and python3 (the package's script
dependencies) are downloaded with the closure but stay out of the guest: ``perf record``,
``evlist`` and ``script`` without ``-s`` need neither.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .apt import Package, PrivateApt, run_tool, unpack_closure
from .cache import cached_dir, content_key
from .errors import ImageError
from .kernel import KERNELS
from .programs import runtime_files

__all__ = ["GUEST_DIR", "GUEST_PERF", "DebianPerf", "DebianPerfError", "get_debian_perf"]

PACKAGE = "linux-perf"
GUEST_DIR = "/debperf"
GUEST_PERF = f"{GUEST_DIR}/run-perf"  # the wrapper the guest runs
GUEST_LIB = f"{GUEST_DIR}/lib"
#: the base suite a backports suite builds on: the rest of the closure comes from there
BASE_SUITES = {"trixie-backports": "trixie", "bookworm-backports": "bookworm"}


class DebianPerfError(ImageError):
    """linux-perf could not be fetched, unpacked or laid out for the guest; says which step."""


@dataclass(frozen=True)
class DebianPerf:
    package: str  # "linux-perf=VERSION (SUITE)"
    version: str
    suite: str
    root: Path  # the unpacked closure
    binary: Path  # the ELF perf in the root
    files: dict[str, Path]  # guest path -> host file, for the initramfs

    def describe(self) -> dict:
        return {"package": self.package, "version": self.version, "suite": self.suite,
                "binary": str(self.binary), "guest": GUEST_PERF}


def wrapper_script() -> bytes:
    """``/debperf/run-perf``: perf through its own loader and libraries (busybox sh)."""
    return (f"#!/bin/sh\nexec {GUEST_LIB}/ld-linux-x86-64.so.2 --library-path {GUEST_LIB} "
            f"{GUEST_DIR}/perf \"$@\"\n").encode()


def find_perf_binary(root: Path) -> Path:
    """The ELF perf in an unpacked linux-perf: ``/usr/bin/perf`` (or, up to 6.x packages, the
    versioned ``/usr/bin/perf_X.Y`` behind a shell wrapper)."""
    candidates = [root / "usr/bin/perf", *sorted((root / "usr/bin").glob("perf_*"))]
    for c in candidates:
        if c.is_file() and c.read_bytes()[:4] == b"\x7fELF":
            return c
    raise DebianPerfError(f"no ELF perf binary under {root / 'usr/bin'} (looked at "
                          f"{', '.join(p.name for p in candidates) or 'nothing'})")


def get_debian_perf(kernel: str = "default") -> DebianPerf:
    """Fetch (cached) linux-perf of ``kernel``'s suite with its library closure."""
    if kernel not in KERNELS:
        raise DebianPerfError(f"no suite known for kernel {kernel!r}; known: {', '.join(KERNELS)}")
    suite = KERNELS[kernel][0]
    apt = PrivateApt()
    try:
        pkg = apt.package(PACKAGE, suite)
    except ImageError as exc:
        raise DebianPerfError(f"cannot find {PACKAGE} in {suite}: {exc}") from exc
    key = content_key("debperf-v1", pkg.name, pkg.version, pkg.sha256)
    d = cached_dir("debperf", key, lambda tmp: _build(apt, pkg, tmp),
                   what=f"{pkg.name}={pkg.version} ({suite}) with its libraries")
    info = json.loads((d / "debperf.json").read_text())
    root = d / "root"
    files = {g: root / h for g, h in info["files"].items()}
    files[GUEST_PERF] = d / "run-perf"
    return DebianPerf(f"{pkg.name}={pkg.version} ({suite})", pkg.version, suite, root, root / info["binary"], files)


def _build(apt: PrivateApt, pkg: Package, tmp: Path) -> None:
    keep = (pkg.suite, BASE_SUITES.get(pkg.suite, pkg.suite))
    root, debs = unpack_closure(apt, pkg, tmp, keep, DebianPerfError)
    binary = find_perf_binary(root)
    try:
        needed = runtime_files(binary, root, GUEST_LIB)
    except ImageError as exc:
        raise DebianPerfError(f"the library closure of {binary} is incomplete: {exc}") from exc
    files = {f"{GUEST_DIR}/perf": str(binary.relative_to(root))}
    for host, guest in needed:
        resolved = host.resolve()
        if not resolved.is_relative_to(root.resolve()):
            raise DebianPerfError(f"{binary} would load {host} from outside the unpacked root")
        files[guest] = str(resolved.relative_to(root.resolve()))
    (tmp / "run-perf").write_bytes(wrapper_script())
    (tmp / "run-perf").chmod(0o755)
    # The version perf prints, run on this machine through the same loader (a check that the
    # closure is complete, and the first fact recorded about it).
    loader = next(root / h for g, h in files.items() if g.endswith("/ld-linux-x86-64.so.2"))
    libdir = tmp / "hostlib"
    libdir.mkdir()
    for g, h in files.items():
        if g.startswith(GUEST_LIB + "/"):
            (libdir / g.rsplit("/", 1)[1]).symlink_to(root / h)
    r = _run([str(loader), "--library-path", str(libdir), str(binary), "--version"], "perf --version")
    shutil.rmtree(libdir)
    (tmp / "debperf.json").write_text(json.dumps(
        {"package": pkg.name, "version": pkg.version, "suite": pkg.suite, "binary": str(binary.relative_to(root)),
         "perf_version": r.stdout.strip(), "packages": sorted(d.name for d in debs), "files": files}, indent=1))


def _run(cmd: list[str], what: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return run_tool(cmd, what, DebianPerfError, timeout)
