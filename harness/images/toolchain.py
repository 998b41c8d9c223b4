"""Toolchains that build the guest programs, one per SFrame generation.

* ``host``: the machine's own gcc and binutils 2.40 (Debian 12): ``as --gsframe`` emits SFrame V1.
* ``trixie``: a debootstrap root with binutils 2.44: SFrame V2 (FDE_SORTED) and PT_GNU_SFRAME.
* ``sid``: a debootstrap root with binutils 2.46+: SFrame V3 (FDE_SORTED | FDE_FUNC_START_PCREL).
* ``sid-gcc11`` .. ``sid-gcc15``: the other gcc versions sid ships, with sid's binutils; and
  ``sid-clang22``, ``sid-clang23``: clang with its integrated assembler's SFrame emitter (V2) and
  its own lld.  They share one root of their own (sid's recipe plus those packages), so the
  ``sid`` root's recipe and cache key stay as they were.
* a user's own install (:func:`user_toolchain`, ``--toolchain NAME=PREFIX``): ``PREFIX/bin`` with
  gcc or clang, as and ld (a build of a binutils or gcc branch), run on the host with
  ``PREFIX/bin`` first on ``PATH`` and ``-B PREFIX/bin/`` given to the driver.

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
#: sid's other compilers: name -> (C driver, C++ driver, packages, compiler flags of its own)
SID_GCCS = (11, 12, 13, 14, 15)  # gcc-16 is sid's default: the ``sid`` root
SID_CLANGS = (22, 23)
SID_COMPILERS = {
    **{f"sid-gcc{v}": (f"gcc-{v}", f"g++-{v}", (f"gcc-{v}", f"g++-{v}"), ()) for v in SID_GCCS},
    # llvm-N: llvm-objdump-N and llvm-readobj-N --sframe, LLVM's own reading of its SFrame
    **{f"sid-clang{v}": (f"clang-{v}", f"clang++-{v}", (f"clang-{v}", f"lld-{v}", f"llvm-{v}"), ())
       for v in SID_CLANGS},
    # the same clang with gas (sid's 2.47) assembling its output: the same source's SFrame from
    # the other producer, each judged against its own CFI
    **{f"sid-clang{v}-gas": (f"clang-{v}", f"clang++-{v}", (), ("-fno-integrated-as",)) for v in SID_CLANGS},
}
EXTRA_PACKAGES = tuple(p for _, _, pkgs, _ in SID_COMPILERS.values() for p in pkgs)


@dataclass(frozen=True)
class Toolchain:
    name: str
    root: Path  # "/" for the host
    binutils_version: str
    gcc_version: str  # the compiler's version (clang's for a clang toolchain)
    cc: str = "gcc"  # the C driver, and the C++ one
    cxx: str = "g++"
    prefix: Path | None = None  # a user's install (run on the host, PREFIX/bin first)
    extra_flags: tuple[str, ...] = ()  # the compiler's flags of this toolchain (-fno-integrated-as)

    @property
    def is_host(self) -> bool:
        return str(self.root) == "/"

    @property
    def is_clang(self) -> bool:
        return "clang" in Path(self.cc).name

    @property
    def integrated_as(self) -> bool:
        """clang assembling its own output (LLVM's SFrame emitter), not gas."""
        return self.is_clang and "-fno-integrated-as" not in self.extra_flags

    @property
    def assembler(self) -> str:
        """Who writes the objects' SFrame: ``clang-22 integrated assembler`` or ``gas 2.47.50``."""
        if self.integrated_as:
            return f"{Path(self.cc).name} {self.gcc_version} integrated assembler"
        return f"gas {self.binutils_version}"

    def driver(self, cxx: bool = False) -> str:
        return self.cxx if cxx else self.cc

    def sframe_version(self) -> int:
        """The SFrame version this toolchain's assembler emits (binutils 2.40: 1, 2.41-2.45: 2,
        2.46+: 3; clang's integrated assembler: 2)."""
        if self.integrated_as:
            return 2
        major, minor = (int(x) for x in self.binutils_version.split(".")[:2])
        if (major, minor) <= (2, 40):
            return 1
        return 2 if (major, minor) <= (2, 45) else 3

    def run(self, argv: list[str], *, cwd: str = "/", timeout: float = 300) -> subprocess.CompletedProcess:
        """Run ``argv`` with this toolchain (inside the chroot for a debootstrap root)."""
        env = None
        if self.prefix is not None:
            env = {**os.environ, "PATH": f"{self.prefix / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        if self.is_host:
            cmd = argv
        else:
            cmd = ["chroot", str(self.root), "/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "LANG=C.UTF-8",
                   "sh", "-c", 'cd "$0" && exec "$@"', cwd, *argv]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                               cwd=cwd if self.is_host else None, env=env)
        except subprocess.TimeoutExpired as exc:
            raise ImageError(f"{self.name}: {' '.join(argv)} timed out after {timeout}s") from exc
        if r.returncode != 0:
            raise ImageError(f"{self.name}: {' '.join(argv)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
        return r

    def host_path(self, path_in_root: str) -> Path:
        """Where a path inside the toolchain root is seen from the host."""
        return Path(path_in_root) if self.is_host else self.root / path_in_root.lstrip("/")

    def versions(self) -> dict[str, str]:
        """The first line of ``as --version``, ``ld --version`` and the compiler's ``--version``
        (what a reproducer records of the toolchain that built it)."""
        return _tool_versions(self)

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


_VERSIONS: dict[Toolchain, dict[str, str]] = {}


def _tool_versions(tc: Toolchain) -> dict[str, str]:
    if tc not in _VERSIONS:
        out = {}
        for key, argv in (("as", ["as", "--version"]), ("ld", ["ld", "--version"]), ("cc", [tc.cc, "--version"])):
            if tc.prefix is not None and key != "cc":
                argv = [str(tc.prefix / "bin" / argv[0]), *argv[1:]]
            try:
                out[key] = tc.run(argv, timeout=60).stdout.splitlines()[0].strip()
            except (ImageError, IndexError) as exc:
                out[key] = f"unknown ({str(exc).splitlines()[0] if str(exc) else 'no output'})"
        _VERSIONS[tc] = out
    return _VERSIONS[tc]


def _versions(run, cc: str = "gcc", ld_cmd: str = "ld") -> tuple[str, str]:
    ld = run([ld_cmd, "--version"]).stdout.splitlines()[0]
    if "clang" in Path(cc).name:
        first = run([cc, "--version"]).stdout.splitlines()[0]
        m = re.search(r"clang version (\S+)", first)
        if not m:
            raise ImageError(f"cannot read clang's version from {first!r}")
        gcc = m.group(1)
    else:
        gcc = run([cc, "-dumpfullversion"]).stdout.strip()
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", ld.split(")")[-1]) or re.search(r"(\d+\.\d+)", ld)
    if not m:
        raise ImageError(f"cannot read the binutils version from {ld!r}")
    return m.group(1), gcc


def get_toolchain(name: str) -> Toolchain:
    if name == "host":
        tc = Toolchain("host", Path("/"), "", "")
        b, g = _versions(tc.run)
        return Toolchain("host", Path("/"), b, g)
    if name in USER_TOOLCHAINS:
        return _user(name, USER_TOOLCHAINS[name])
    if name in SID_COMPILERS:
        cc, cxx, _, extra = SID_COMPILERS[name]
        root = _root("sid", ROOT_PACKAGES + EXTRA_PACKAGES, "sid's other compilers")
        tc = Toolchain(name, root, "", "", cc, cxx)
        b, g = _versions(tc.run, cc)
        return Toolchain(name, root, b, g, cc, cxx, extra_flags=extra)
    if name not in ROOT_SUITES:
        raise ImageError(f"unknown toolchain {name!r}; known: {', '.join(TOOLCHAINS + tuple(USER_TOOLCHAINS))}")
    root = _root(ROOT_SUITES[name], ROOT_PACKAGES, f"{name} toolchain root")
    tc = Toolchain(name, root, "", "")
    b, g = _versions(tc.run)
    return Toolchain(name, root, b, g)


def _root_key(suite: str, packages: tuple[str, ...]) -> str:
    # today's roots keep their key: the recipe is (suite, ROOT_PACKAGES) as before
    return content_key("toolchain-v1", suite, packages)


def _root(suite: str, packages: tuple[str, ...], what: str) -> Path:
    """The debootstrap root of ``suite`` with ``packages``, built once and cached."""
    # The root is keyed by recipe, not by date: a cached root is reused until the recipe changes
    # or `harness images build --refresh` removes it.
    key = _root_key(suite, packages)

    def build(tmp: Path) -> None:
        root = tmp / "root"
        debs = cache_root() / "debootstrap-debs" / suite
        debs.mkdir(parents=True, exist_ok=True)
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(packages)}",
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

    d = cached_dir("toolchains", key, build, what=f"{what} (debootstrap {suite})")
    return d / "root"


#: a user's own installs, by name (``--toolchain NAME=PREFIX``): :func:`user_toolchain` adds one
USER_TOOLCHAINS: dict[str, Path] = {}
_NAME = re.compile(r"[a-z][a-z0-9_.+-]{0,31}")


def user_toolchain(name: str, prefix: str | Path) -> Toolchain:
    """Register ``PREFIX`` (a directory whose ``bin`` holds gcc or clang, as and ld) as toolchain
    ``name`` and return it; a name taken by a root, or a prefix without those tools, is an
    :class:`ImageError`."""
    prefix = Path(prefix).absolute()
    if not _NAME.fullmatch(name) or name in TOOLCHAINS:
        raise ImageError(f"--toolchain {name}={prefix}: the name must be new (not {', '.join(TOOLCHAINS)}) "
                         "and made of a-z, 0-9, '.', '_', '+', '-'")
    bindir = prefix / "bin"
    missing = [t for t in ("as", "ld") if not os.access(bindir / t, os.X_OK)]
    if not any(os.access(bindir / c, os.X_OK) for c in ("gcc", "clang")):
        missing.insert(0, "gcc or clang")
    if missing:
        raise ImageError(f"--toolchain {name}={prefix}: {bindir} has no {', '.join(missing)} "
                         "(a user's toolchain is PREFIX/bin with gcc or clang, as and ld)")
    USER_TOOLCHAINS[name] = prefix
    return _user(name, prefix)


def _user(name: str, prefix: Path) -> Toolchain:
    bindir = prefix / "bin"
    if os.access(bindir / "gcc", os.X_OK):
        cc, cxx = str(bindir / "gcc"), str(bindir / "g++")
    else:
        cc, cxx = str(bindir / "clang"), str(bindir / "clang++")
    tc = Toolchain(name, Path("/"), "", "", cc, cxx, prefix)
    b, g = _versions(tc.run, cc, str(bindir / "ld"))
    return Toolchain(name, Path("/"), b, g, cc, cxx, prefix)


def known_toolchains() -> tuple[str, ...]:
    """Every name ``--toolchains`` takes: the roots, sid's other compilers, the user's installs."""
    return TOOLCHAINS + tuple(USER_TOOLCHAINS)


def built_toolchain(name: str) -> Toolchain | None:
    """The root ``name`` if the cache holds it already (the host: always), else None: for a
    reader of its tools (:mod:`harness.toolchain`), which must not start a debootstrap."""
    if name == "host":
        return get_toolchain("host")
    if name in USER_TOOLCHAINS:
        return get_toolchain(name)
    if name in SID_COMPILERS:
        d = cache_root() / "toolchains" / _root_key("sid", ROOT_PACKAGES + EXTRA_PACKAGES)
    elif name in ROOT_SUITES:
        d = cache_root() / "toolchains" / _root_key(ROOT_SUITES[name], ROOT_PACKAGES)
    else:
        return None
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


TOOLCHAINS = ("host", *ROOT_SUITES, *SID_COMPILERS)
#: the default matrix of a campaign: today's three roots (sid's other compilers are named with --toolchains)
DEFAULT_TOOLCHAINS = ("host", *ROOT_SUITES)
