"""Toolchains that build the guest programs, one per SFrame generation.

* ``host``: the machine's own gcc and binutils 2.40 (Debian 12): ``as --gsframe`` emits SFrame V1.
* ``trixie``: a debootstrap root with binutils 2.44: SFrame V2 (FDE_SORTED) and PT_GNU_SFRAME.
* ``sid``: a debootstrap root with binutils 2.46+: SFrame V3 (FDE_SORTED | FDE_FUNC_START_PCREL).

Roots are built with ``debootstrap --variant=minbase`` from the host's own Debian archive and
cached; commands run inside them through ``chroot``.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from ..progress import step
from .apt import debian_archive_uri
from .cache import cache_root, cached_dir, content_key
from .errors import ImageError
from .lock import DEFAULT_WAIT, cache_lock

# Packages of every toolchain root: the compiler, binutils, a libc to link against, 32-bit
# multilib (gcc-multilib pulls in libc6-dev-i386), and make.
ROOT_PACKAGES = ("gcc", "g++", "binutils", "libc6-dev", "gcc-multilib", "make", "file")
ROOT_SUITES = {"trixie": "trixie", "sid": "sid"}
DEBOOTSTRAP_TIMEOUT = 1200


@dataclass(frozen=True)
class Toolchain:
    name: str
    root: Path  # "/" for the host
    binutils_version: str
    gcc_version: str

    @property
    def is_host(self) -> bool:
        return str(self.root) == "/"

    def sframe_version(self) -> int:
        """The SFrame version this binutils emits (2.40: 1, 2.41-2.45: 2, 2.46+: 3)."""
        major, minor = (int(x) for x in self.binutils_version.split(".")[:2])
        if (major, minor) <= (2, 40):
            return 1
        return 2 if (major, minor) <= (2, 45) else 3

    def run(self, argv: list[str], *, cwd: str = "/", timeout: float = 300) -> subprocess.CompletedProcess:
        """Run ``argv`` with this toolchain (inside the chroot for a debootstrap root)."""
        if self.is_host:
            cmd = argv
        else:
            cmd = ["chroot", str(self.root), "/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "LANG=C.UTF-8",
                   "sh", "-c", 'cd "$0" && exec "$@"', cwd, *argv]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                               cwd=cwd if self.is_host else None)
        except subprocess.TimeoutExpired as exc:
            raise ImageError(f"{self.name}: {' '.join(argv)} timed out after {timeout}s") from exc
        if r.returncode != 0:
            raise ImageError(f"{self.name}: {' '.join(argv)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
        return r

    def host_path(self, path_in_root: str) -> Path:
        """Where a path inside the toolchain root is seen from the host."""
        return Path(path_in_root) if self.is_host else self.root / path_in_root.lstrip("/")

    def workdir(self, name: str) -> tuple[Path, str]:
        """A fresh private build directory: (host path, path as seen by the toolchain); the
        caller removes it.  Made by ``mkdtemp`` in the toolchain's /tmp (the host's: ``$TMPDIR``
        or /tmp; mode 0700, a name no one can guess or take first), so two harnesses never share
        one and no other user can plant files or links in it."""
        if self.is_host:
            outer = Path(tempfile.mkdtemp(prefix=f"harness-build-{name}-"))  # $TMPDIR, else /tmp
            return outer, str(outer)
        outer = Path(tempfile.mkdtemp(prefix=f"harness-build-{name}-", dir=self.host_path("/tmp")))
        return outer, "/tmp/" + outer.name


def _versions(run) -> tuple[str, str]:
    ld = run(["ld", "--version"]).stdout.splitlines()[0]
    gcc = run(["gcc", "-dumpfullversion"]).stdout.strip()
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", ld.split(")")[-1]) or re.search(r"(\d+\.\d+)", ld)
    if not m:
        raise ImageError(f"cannot read the binutils version from {ld!r}")
    return m.group(1), gcc


def get_toolchain(name: str) -> Toolchain:
    if name == "host":
        tc = Toolchain("host", Path("/"), "", "")
        b, g = _versions(tc.run)
        return Toolchain("host", Path("/"), b, g)
    if name not in ROOT_SUITES:
        raise ImageError(f"unknown toolchain {name!r}; known: host, {', '.join(ROOT_SUITES)}")
    suite = ROOT_SUITES[name]
    # The root is keyed by recipe, not by date: a cached root is reused until the recipe changes
    # or `harness images build --refresh` removes it.
    key = content_key("toolchain-v1", suite, ROOT_PACKAGES)

    def build(tmp: Path) -> None:
        root = tmp / "root"
        debs = cache_root() / "debootstrap-debs" / suite
        debs.mkdir(parents=True, exist_ok=True)
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(ROOT_PACKAGES)}",
               f"--cache-dir={debs}", suite, str(root), debian_archive_uri()]
        # The .deb cache of a suite is shared by every root of that suite (another recipe's).
        with cache_lock(debs.parent / f".{suite}.lock", f"another harness's debootstrap {suite}",
                        timeout=DEBOOTSTRAP_TIMEOUT + DEFAULT_WAIT):
            rc, output = _debootstrap(cmd, suite)
        if rc != 0:
            log = root / "debootstrap/debootstrap.log"
            tail = log.read_text()[-3000:] if log.exists() else output[-3000:]
            raise ImageError(f"debootstrap {suite} failed ({rc}):\n{tail}")
        for sub in ("var/cache/apt/archives", "usr/share/doc", "usr/share/man", "usr/share/locale"):
            shutil.rmtree(root / sub, ignore_errors=True)

    d = cached_dir("toolchains", key, build, what=f"{name} toolchain root (debootstrap {suite})")
    tc = Toolchain(name, d / "root", "", "")
    b, g = _versions(tc.run)
    return Toolchain(name, d / "root", b, g)


def built_toolchain(name: str) -> Toolchain | None:
    """The root ``name`` if the cache holds it already (the host: always), else None: for a
    reader of its tools (:mod:`harness.toolchain`), which must not start a debootstrap."""
    if name == "host":
        return get_toolchain("host")
    if name not in ROOT_SUITES:
        return None
    d = cache_root() / "toolchains" / content_key("toolchain-v1", ROOT_SUITES[name], ROOT_PACKAGES)
    return get_toolchain(name) if (d / ".complete").exists() else None


def _debootstrap(cmd: list[str], suite: str) -> tuple[int, str]:
    """Run debootstrap, its current "I: ..." line shown as a step's progress; (status, the
    output's tail).  Killed after DEBOOTSTRAP_TIMEOUT."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", start_new_session=True)
    except FileNotFoundError as exc:
        raise ImageError("debootstrap is not installed (apt-get install debootstrap)") from exc
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        _kill_group(proc)

    timer = threading.Timer(DEBOOTSTRAP_TIMEOUT, expire)
    timer.start()
    tail: collections.deque[str] = collections.deque(maxlen=60)
    try:
        with step("images", f"debootstrap {suite}") as st:
            for line in proc.stdout:
                tail.append(line)
                if line.startswith("I: "):
                    st.update(f"debootstrap {suite}: {line[3:].strip()}")
            rc = proc.wait()
            st.end(f"debootstrap {suite} {'done' if rc == 0 else f'failed ({rc})'} in {st.elapsed:.1f}s")
    finally:
        timer.cancel()
        if proc.poll() is None:
            _kill_group(proc)
            proc.wait()
    if expired.is_set():
        raise ImageError(f"debootstrap {suite} timed out after {DEBOOTSTRAP_TIMEOUT}s")
    return rc, "".join(tail)


def _kill_group(proc: subprocess.Popen) -> None:
    """debootstrap and what it runs (wget, dpkg, chroot): its own process group."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


TOOLCHAINS = ("host", *ROOT_SUITES)
