"""Which QEMU runs the guests: the host's (Debian 12's 7.2) or 11.x from trixie-backports.

Why a second QEMU: up to 10.1 the gdb stub flushes all translated code on every stop, so a stop
costs several milliseconds and the guest runs slowly after each one while it retranslates;
10.2 stopped doing that (REFERENCE.md section 6: stop p50 0.7-1 ms against 9-11 ms).  Debian 12
ships 7.2; trixie-backports has 11.x.

How it is obtained (and why this way): apt itself resolves the complete dependency closure of
``qemu-system-x86`` from trixie-backports (``-t trixie-backports --no-install-recommends``,
every other suite pinned away) against an *empty* dpkg status, downloads it (``--download-only``
into a private directory, through :class:`~harness.images.apt.PrivateApt`'s lists: the
archive's address comes from the host's own apt sources), and each ``.deb`` is unpacked with
``dpkg-deb -x`` into ``cache/qemu/KEY/root``.  About 90 packages, including trixie's glibc.

The alternatives were a debootstrap root of trixie with the package installed inside it (the
toolchains' way), or the QEMU packages alone on top of the host's libraries.  The first needs
root, a chroot with mounts to run apt and maintainer scripts in, and a minute of debootstrap for
a root three times the size, none of which QEMU needs at run time; the second means deciding by
hand which of bookworm's libraries are new enough and mixing two glibc generations.  The closure
needs neither privileges nor mounts, apt does the dependency resolution, and the binary runs on
exactly the libraries Debian built and tested it with.

How it runs: no chroot.  The root's own dynamic loader is executed directly
(``ROOT/usr/lib64/ld-linux-x86-64.so.2 --library-path ROOT/usr/lib/x86_64-linux-gnu:... QEMU``),
so every host path (kernel, initramfs, the Unix sockets in /tmp) stays valid and nothing has to be
mounted or cleaned up after a SIGKILL.  QEMU finds its firmware (``/usr/share/qemu``, and the BIOS
in ``/usr/share/seabios``: Debian's firmware path) and its modules through its own relocation
mechanism: it takes the directory of ``/proc/self/exe`` (here: the loader's) and, when a
``qemu-bundle`` directory sits there, prefixes every configured path with it.  The build puts a
``qemu-bundle -> ROOT`` link next to the loader, so the host's 7.2 firmware and modules are never
searched (``-L help`` lists only directories inside the root; the build checks it), and
``QEMU_MODULE_DIR`` names the root's module directory as well.  The build also checks that every
shared library resolves inside the root and that ``--version`` runs.

Selection: ``host``, ``backports``, or ``auto`` (backports when its image can be built and is a
QEMU that no longer flushes on stops, else the host's, with the reason printed).  The choice comes
from the caller (``--qemu``, ``GuestSpec.qemu``) or, when it gives none, from ``$HARNESS_QEMU``
(read only in :func:`choice_from_env`), else :data:`DEFAULT_CHOICE`.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from .apt import Package, PrivateApt, run_tool, unpack_closure
from .cache import cache_root, cached_dir, content_key, progress
from .errors import ImageError
from .lock import write_atomic

QEMU_CHOICES = ("auto", "host", "backports")
#: the choice when neither the caller nor $HARNESS_QEMU names one
DEFAULT_CHOICE = "backports"
ENV_VAR = "HARNESS_QEMU"

HOST_PREFIX = ("qemu-system-x86_64",)
SUITE = "trixie-backports"
BASE_SUITE = "trixie"  # what backports builds on: the rest of the closure comes from here
PACKAGE = "qemu-system-x86"
#: the first QEMU whose gdb stub no longer flushes translated code on every stop
NO_FLUSH_VERSION = (10, 2)

MULTIARCH = "usr/lib/x86_64-linux-gnu"
LOADER = "usr/lib64/ld-linux-x86-64.so.2"
BINARY = "usr/bin/qemu-system-x86_64"
VERSION_TIMEOUT = 30


class QemuImageError(ImageError):
    """The backports QEMU could not be fetched, unpacked or run; the message says which step."""


@dataclass(frozen=True)
class Qemu:
    """One QEMU the harness can run: its command prefix and what it is."""

    name: str  # "host", "backports" or "custom"
    prefix: tuple[str, ...]
    banner: str  # first line of --version
    why: str = ""  # why this one was chosen
    package: str = ""  # "qemu-system-x86=VERSION (suite)" for the backports image
    root: str = ""  # its unpacked root, for the backports image

    @property
    def version(self) -> tuple[int, ...] | None:
        return parse_version(self.banner)

    def describe(self) -> dict:
        d = asdict(self)
        d["prefix"] = list(self.prefix)
        return d


# -- pure parts ----------------------------------------------------------------------------------
def parse_version(banner: str) -> tuple[int, ...] | None:
    """``QEMU emulator version 11.1.3 (Debian 1:11.1.3+ds-1~bpo13+1)`` -> (11, 1, 3)."""
    m = re.search(r"QEMU emulator version (\d+)\.(\d+)(?:\.(\d+))?", banner)
    if not m:
        return None
    return tuple(int(g) for g in m.groups() if g is not None)


def command_prefix(root: Path) -> list[str]:
    """The command that runs the QEMU unpacked in ``root`` from the host, without a chroot."""
    root = Path(root)
    if ":" in str(root):
        raise QemuImageError(f"{root}: a ':' in the path cannot go into the loader's --library-path")
    libdirs = [root / MULTIARCH, root / "lib/x86_64-linux-gnu"]
    return ["env", f"QEMU_MODULE_DIR={root / MULTIARCH / 'qemu'}", str(root / LOADER),
            "--library-path", ":".join(map(str, libdirs)), str(root / BINARY)]


def choice_from_env(environ: dict[str, str] | None = None) -> str:
    """The QEMU named by ``$HARNESS_QEMU`` (the one place it is read), else the default."""
    value = (os.environ if environ is None else environ).get(ENV_VAR, "").strip()
    if not value:
        return DEFAULT_CHOICE
    if value not in QEMU_CHOICES:
        raise ValueError(f"${ENV_VAR}={value!r}: expected one of {', '.join(QEMU_CHOICES)}")
    return value


def choose(choice: str, host: Callable[[], Qemu], backports: Callable[[], Qemu]) -> Qemu:
    """Decide which QEMU ``choice`` means; ``auto`` falls back to the host's with a reason."""
    if choice == "host":
        return replace(host(), why="the host's QEMU was asked for")
    if choice == "backports":
        return replace(backports(), why=f"{SUITE}'s QEMU was asked for")
    if choice != "auto":
        raise ValueError(f"unknown QEMU {choice!r}; known: {', '.join(QEMU_CHOICES)}")
    try:
        q = backports()
    except ImageError as exc:
        reason = f"the {SUITE} QEMU cannot be used: {exc}"
    else:
        v = q.version
        if v is not None and v[:2] >= NO_FLUSH_VERSION:
            return replace(q, why=f"auto: {SUITE}'s QEMU {'.'.join(map(str, v))} does not flush translated "
                                  f"code on every gdb stop")
        reason = f"the {SUITE} QEMU ({q.banner!r}) is older than {'.'.join(map(str, NO_FLUSH_VERSION))}"
    return replace(host(), why=f"auto: {reason}; using the host's")


# -- running a QEMU ------------------------------------------------------------------------------
def version_banner(prefix: Sequence[str]) -> str:
    """First line of ``--version``, or "unavailable"/"unknown" (never raises)."""
    try:
        out = subprocess.run([*prefix, "--version"], capture_output=True, text=True,
                             timeout=VERSION_TIMEOUT).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"
    return out.splitlines()[0] if out else "unknown"


def host_qemu() -> Qemu:
    return Qemu("host", HOST_PREFIX, version_banner(HOST_PREFIX))


# -- the backports image -------------------------------------------------------------------------
def get_backports_qemu() -> Qemu:
    """Fetch (cached) the newest ``qemu-system-x86`` of trixie-backports with its closure."""
    apt = PrivateApt()
    if SUITE not in apt.suites or BASE_SUITE not in apt.suites:
        raise QemuImageError(f"the private apt configuration reads {apt.suites}, not {BASE_SUITE} and {SUITE}")
    pkg = _resolve(apt)
    key = content_key("qemu-v1", pkg.name, pkg.version, pkg.sha256)
    d = cached_dir("qemu", key, lambda tmp: _build(apt, pkg, tmp),
                   what=f"QEMU root ({pkg.name}={pkg.version} from {SUITE} and its dependencies)")
    info = json.loads((d / "qemu.json").read_text())
    return Qemu("backports", tuple(command_prefix(d / "root")), info["banner"],
                package=f"{pkg.name}={pkg.version} ({SUITE})", root=str(d / "root"))


def _resolve(apt: PrivateApt) -> Package:
    """The package, remembered until the next ``apt-get update`` of the private lists."""
    try:
        apt.update()
    except ImageError as exc:
        raise QemuImageError(f"cannot read {SUITE} to find {PACKAGE}: {exc}") from exc
    memo = apt.root / f"resolved-{SUITE}-{PACKAGE}.json"
    stamp = (apt.root / "updated").stat().st_mtime
    if memo.exists():
        d = json.loads(memo.read_text())
        if d.get("stamp") == stamp:
            return Package(**d["package"])
    try:
        pkg = apt.package(PACKAGE, SUITE)
    except ImageError as exc:
        raise QemuImageError(f"cannot find {PACKAGE} in {SUITE}: {exc}") from exc
    write_atomic(memo, json.dumps({"stamp": stamp, "package": asdict(pkg)}))  # read by other harnesses
    return pkg


def _build(apt: PrivateApt, pkg: Package, tmp: Path) -> None:
    root, debs = unpack_closure(apt, pkg, tmp, (SUITE, BASE_SUITE), QemuImageError)
    packages = [deb.name.rsplit(".", 1)[0] for deb in debs]
    loader = (root / LOADER).resolve()
    if not loader.is_file() or not loader.is_relative_to(root.resolve()):
        raise QemuImageError(f"{root / LOADER} does not lead to a dynamic loader inside the root ({loader})")
    # QEMU relocates its configured paths (firmware, modules) under EXEC_DIR/qemu-bundle, and
    # EXEC_DIR is the directory of /proc/self/exe: the loader's, since the loader is what runs.
    os.symlink(os.path.relpath(root, loader.parent), loader.parent / "qemu-bundle")
    prefix = command_prefix(root)
    _check_libraries(root, prefix)
    _check_data_dirs(root, prefix)
    r = _run([*prefix, "--version"], "qemu-system-x86_64 --version from the unpacked root")
    banner = r.stdout.splitlines()[0] if r.stdout else ""
    if parse_version(banner) is None:
        raise QemuImageError(f"qemu-system-x86_64 --version from {root} printed {r.stdout!r}")
    (tmp / "qemu.json").write_text(json.dumps(
        {"package": pkg.name, "version": pkg.version, "suite": SUITE, "banner": banner,
         "packages": packages}, indent=1))


def _check_libraries(root: Path, prefix: list[str]) -> None:
    """Every shared library QEMU loads must come from the root, none from the host."""
    loader_args = prefix[2:-1]  # loader --library-path DIRS
    r = _run([*loader_args, "--list", str(root / BINARY)], "listing QEMU's shared libraries")
    outside = []
    for line in r.stdout.splitlines():
        m = re.search(r"=>\s+(\S+)", line) or re.match(r"\s*(/\S+)", line)
        if "not found" in line or (m and m.group(1).startswith("/") and not m.group(1).startswith(str(root))):
            outside.append(line.strip())
    if outside:
        raise QemuImageError("QEMU in " + str(root) + " would load libraries from outside it: " + "; ".join(outside))


def _check_data_dirs(root: Path, prefix: list[str]) -> None:
    """QEMU must search only the root for firmware (``-L help`` lists where it looks)."""
    r = _run([*prefix, "-L", "help"], "qemu-system-x86_64 -L help")
    dirs = [ln.strip() for ln in r.stdout.splitlines() if ln.strip()]
    outside = [d for d in dirs if not os.path.realpath(d).startswith(str(root.resolve()))]
    if not dirs or outside:
        raise QemuImageError(f"QEMU in {root} searches firmware outside its root: {outside or 'no directories'}")


def _run(cmd: list[str], what: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return run_tool(cmd, what, QemuImageError, timeout)


# -- selection -----------------------------------------------------------------------------------
@functools.cache
def _resolve_named(choice: str) -> Qemu:
    q = choose(choice, host_qemu, get_backports_qemu)
    if choice == "auto" and q.name == "host":
        progress(f"using the host's QEMU ({q.banner}): {q.why}")
    return q


def resolve_qemu(choice: str | Sequence[str] | None = None) -> Qemu:
    """The QEMU for ``choice``: a name (auto, host, backports), an explicit command prefix, or
    None for ``$HARNESS_QEMU`` / the default.  Named choices are resolved once per process."""
    if choice is None:
        choice = choice_from_env()
    if isinstance(choice, str):
        if choice not in QEMU_CHOICES:
            raise ValueError(f"unknown QEMU {choice!r}; known: {', '.join(QEMU_CHOICES)}")
        return _resolve_named(choice)
    prefix = tuple(choice)
    if prefix == HOST_PREFIX:
        return replace(host_qemu(), why="the host's QEMU was asked for")
    return Qemu("custom", prefix, version_banner(prefix), why="a QEMU command was given")


def cached_backports() -> list[dict]:
    """What ``cache/qemu`` holds (for ``harness doctor``), without building anything."""
    out = []
    d = cache_root() / "qemu"
    for meta in sorted(d.glob("*/qemu.json")) if d.exists() else []:
        info = json.loads(meta.read_text())
        info["path"] = str(meta.parent)
        out.append(info)
    return out
