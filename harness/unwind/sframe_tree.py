"""``harness sframe check --tree DIR``: every ELF file and archive under a directory, checked in
parallel, summarised per finding kind and per Debian package.

The walk stays on DIR's file system and follows no symbolic link (a file reached twice through
usrmerge's ``/lib -> usr/lib`` is checked once).  A file is an ELF file or an ``ar`` archive by
its first bytes.  Each candidate goes to a process pool (bounded by the cores): one that has no
``.sframe`` section or PT_GNU_SFRAME segment (the cheap test: pyelftools reads the headers only)
is counted and dropped, one that has is checked by :func:`.check.check_file`.  Whatever one
file does -- a truncated ELF header, a section that does not decode -- it is that file's typed
error, never the run's: the worker returns a :class:`FileResult` whatever happens, and an
exception that is not the input's fault (a checker bug) is recorded with its type so it is not
mistaken for bad input.

Packages: a Debian root lists each package's files in ``var/lib/dpkg/info/PKG.list``; a file's
package is the one whose list names it (through the root's usrmerge links).
"""

from __future__ import annotations

import os
import stat
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import dataclass, field
from pathlib import Path

from elftools.elf.elffile import ELFFile

from ..sframe.ar import is_archive
from ..sframe.elf import PT_GNU_SFRAME, segment_type
from ..sframe.errors import SFrameError
from .sframe_check import ELF_DECODE_ERRORS, check_file

NO_PACKAGE = "(no package)"
DEFAULT_TIMEOUT = 1800.0  # the whole run's bound, seconds


@dataclass
class FileResult:
    """One file's outcome (picklable: it crosses from a worker)."""

    path: str  # as seen inside the root ("/usr/lib/...")
    archive: bool
    has_sframe: bool = False
    versions: list[int] = field(default_factory=list)  # of each checked SFrame section
    fdes: int = 0
    fres: int = 0
    fres_checked: int = 0  # FREs compared with .eh_frame at every address they cover
    addresses: int = 0  # addresses compared
    cfi_without_sframe: int = 0  # .eh_frame FDEs with no SFrame FDE (checker notes)
    kinds: dict[str, int] = field(default_factory=dict)  # finding kind -> count
    no_verdict: list[str] = field(default_factory=list)  # checks that checked nothing, one line each
    errors: list[str] = field(default_factory=list)  # bad input (typed SFrameError), one line each
    crash: str | None = None  # an exception that is not the input's fault: "TypeError: ..."
    members: int = 0
    checked_members: int = 0


@dataclass
class TreeReport:
    root: str
    files: int = 0  # regular files walked
    elf_files: int = 0
    archives: int = 0
    results: list[FileResult] = field(default_factory=list)  # files with .sframe, errors or crashes
    packages: dict[str, str] = field(default_factory=dict)  # path -> package, for those results
    wall: float = 0.0
    jobs: int = 1
    timed_out: int = 0  # files not finished within the bound

    @property
    def with_sframe(self) -> list[FileResult]:
        return [r for r in self.results if r.has_sframe]

    def by_kind(self) -> tuple[Counter, Counter]:
        """(findings per kind, files per kind)."""
        findings, files = Counter(), Counter()
        for r in self.results:
            for k, n in r.kinds.items():
                findings[k] += n
                files[k] += 1
        return findings, files

    @property
    def no_verdict(self) -> list[FileResult]:
        """Files with SFrame data whose check checked nothing (never counted clean)."""
        return [r for r in self.results if r.no_verdict]

    def by_package(self) -> dict[str, dict]:
        """package -> {"files": [...], "kinds": Counter of findings, "versions": Counter,
        "no_verdict": files whose check checked nothing, "errors": files with SFrame data that
        could not be read, "crashes": files the checker itself failed on (not the input's fault)}."""
        out: dict[str, dict] = {}
        for r in self.with_sframe:
            p = out.setdefault(self.packages.get(r.path, NO_PACKAGE),
                               {"files": [], "kinds": Counter(), "versions": Counter(), "no_verdict": 0,
                                "errors": 0, "crashes": 0})
            p["files"].append(r.path)
            p["kinds"].update(r.kinds)
            p["versions"].update(r.versions)
            p["no_verdict"] += bool(r.no_verdict)
            p["errors"] += bool(r.errors)
            p["crashes"] += bool(r.crash)
        return out


def candidates(root: Path) -> tuple[int, list[tuple[str, bool]]]:
    """(regular files walked, [(path, is_archive)]) of the ELF files and archives under root."""
    dev = root.stat().st_dev
    walked = 0
    found: list[tuple[str, bool]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = [d for d in dirnames if _same_fs(Path(dirpath) / d, dev)]
        for name in filenames:
            p = os.path.join(dirpath, name)
            try:
                st = os.lstat(p)
                if not stat.S_ISREG(st.st_mode):
                    continue
                walked += 1
                if st.st_size < 8:
                    continue
                with open(p, "rb") as f:
                    head = f.read(8)
            except OSError:
                continue  # unreadable: not ours to judge (a socket's leftovers, a permission)
            if head[:4] == b"\x7fELF":
                found.append((p, False))
            elif is_archive(head):
                found.append((p, True))
    return walked, found


def _same_fs(p: Path, dev: int) -> bool:
    try:
        st = os.lstat(p)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_dev == dev


def check_one(path: str, archive: bool, root: str, expect_binutils: tuple[int, int] | None = None) -> FileResult:
    """The worker: one file's :class:`FileResult`, whatever the file holds."""
    inside = "/" + os.path.relpath(path, root)
    r = FileResult(inside, archive)
    try:
        if not archive:
            if not _elf_has_sframe(path):
                return r
            r.has_sframe = True  # from here on, an error is one of a file with SFrame data
        fc = check_file(path, expect_binutils=expect_binutils)
        r.members = fc.members
        r.errors = [e.replace(path, inside) for e in fc.errors]
        r.checked_members = len(fc.checks)
        r.has_sframe = r.has_sframe or bool(fc.checks)
        # never counted clean: a check that checked nothing (FileCheck.no_verdict), an archive
        # without SFrame data among them -- but an archive none of whose members has SFrame
        # data is a file without it, as an ELF file without is, not a file with no verdict
        r.no_verdict = [(e if archive else f"{path}: {e}").replace(path, inside) for e in fc.no_verdict] \
            if r.has_sframe else []
        for c in fc.checks:
            r.versions.append(c.version)
            r.fdes += c.num_fdes
            r.fres += c.num_fres
            r.fres_checked += c.fres_checked
            r.addresses += c.addresses_compared
            r.cfi_without_sframe += c.cfi_without_sframe
            for k, n in c.by_kind().items():
                r.kinds[k] = r.kinds.get(k, 0) + n
    except SFrameError as exc:
        r.errors.append(str(exc).replace(path, inside))
    except OSError as exc:
        r.errors.append(f"{inside}: {type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 -- one file's checker failure must not end the run; kept apart
        r.crash = f"{type(exc).__name__}: {exc}"
    return r


def _elf_has_sframe(path: str) -> bool:
    """The cheap test: a .sframe section or a PT_GNU_SFRAME segment, from the headers alone.
    Raises SFrameError for an ELF file whose headers do not decode (a truncated one), or whose
    header offsets are past what a file offset can hold (2**63 and up: a file's seek raises
    ValueError, where the checker's in-memory read raises OverflowError, one of ELF_DECODE_ERRORS)."""
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            if elf.num_sections() and elf.get_section_by_name(".sframe") is not None:
                return True
            return any(segment_type(s) == PT_GNU_SFRAME for s in elf.iter_segments())
    except (*ELF_DECODE_ERRORS, ValueError) as exc:
        raise SFrameError(f"{path}: not a readable ELF file: {type(exc).__name__}: {exc}", field="file") from exc


def dpkg_packages(root: Path) -> dict[str, str]:
    """path inside the root -> package, from ``var/lib/dpkg/info/*.list`` (empty for a root
    that is not a Debian one).  Listed paths are also keyed through the root's top-level
    symbolic links (usrmerge: ``/lib`` is ``usr/lib``), as the walk sees them."""
    info = root / "var/lib/dpkg/info"
    links = {}
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        p = root / top
        if p.is_symlink():
            target = os.readlink(p)
            links["/" + top] = "/" + target.lstrip("/")
    out: dict[str, str] = {}
    if not info.is_dir():
        return out
    for lst in sorted(info.glob("*.list")):
        pkg = lst.name[:-len(".list")]
        try:
            lines = lst.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            out.setdefault(line, pkg)
            first, _, rest = line[1:].partition("/")
            alias = links.get("/" + first)
            if alias and rest:
                out.setdefault(f"{alias}/{rest}", pkg)
    return out


def scan(root: str | os.PathLike, jobs: int = 1) -> tuple[TreeReport, list[tuple[str, bool]]]:
    """The report's counts of ``root`` and its candidates, biggest first (the pool's tail is then
    short).  Raises :class:`SFrameError` if ``root`` is not a directory."""
    root = Path(root)
    if not root.is_dir():
        raise SFrameError(f"{root}: not a directory", field="file")
    rep = TreeReport(str(root), jobs=jobs)
    rep.files, found = candidates(root)
    rep.elf_files = sum(not a for _, a in found)
    rep.archives = sum(a for _, a in found)
    found.sort(key=lambda c: -_size(c[0]))
    return rep, found


def kept(r: FileResult) -> bool:
    """A result the report keeps: a file with SFrame data, bad input or a checker crash."""
    return r.has_sframe or bool(r.errors) or r.crash is not None


def check_chunk(files: list[tuple[str, bool]], root: str,
                expect_binutils: tuple[int, int] | None = None) -> list[FileResult]:
    """:func:`check_one` of each file (a task of a campaign: plain paths in, the kept results out)."""
    return [r for r in (check_one(p, a, root, expect_binutils) for p, a in files) if kept(r)]


def chunks(found: list[tuple[str, bool]], n: int) -> list[list[tuple[str, bool]]]:
    """``found`` dealt into chunks of at most ``n`` files, round robin over the sizes (each chunk
    gets big and small files alike)."""
    count = max(1, -(-len(found) // max(1, n)))
    return [c for c in (found[i::count] for i in range(count)) if c]


def finish(rep: TreeReport, t0: float) -> TreeReport:
    """The packages of the kept results, their order, the wall time since ``t0``."""
    pkgs = dpkg_packages(Path(rep.root))
    rep.packages = {r.path: pkgs.get(r.path, NO_PACKAGE) for r in rep.results}
    rep.results.sort(key=lambda r: r.path)
    rep.wall = time.monotonic() - t0
    return rep


def check_tree(root: str | os.PathLike, *, jobs: int | None = None, timeout: float = DEFAULT_TIMEOUT,
               expect_binutils: tuple[int, int] | None = None) -> TreeReport:
    """Check every ELF file and archive under ``root`` in a pool of ``jobs`` processes (default:
    the cores).  Files not done within ``timeout`` seconds of the start are counted as
    ``timed_out``.  Raises :class:`SFrameError` if ``root`` is not a directory."""
    jobs = max(1, jobs or os.cpu_count() or 1)
    t0 = time.monotonic()
    rep, found = scan(root, jobs)
    root = Path(root)
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(check_one, p, a, str(root), expect_binutils) for p, a in found]
        deadline = t0 + timeout
        for fut in futures:
            try:
                r = fut.result(timeout=max(0.0, deadline - time.monotonic()))
            except FuturesTimeout:
                # (not cancelled here: shutdown below cancels what is queued; a future cancelled
                # behind the pool's back makes its manager thread raise InvalidStateError when it
                # finds the workers ended -- CPython 3.11's terminate_broken sets every pending
                # future's exception)
                rep.timed_out += 1
                continue
            if kept(r):
                rep.results.append(r)
        if rep.timed_out:
            # the bound holds: end the pool's own workers (started here) still on a file; their
            # table is taken first (shutdown sets the executor's _processes to None)
            workers = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in workers:
                proc.terminate()
    return finish(rep, t0)


def _size(p: str) -> int:
    try:
        return os.path.getsize(p)
    except OSError:
        return 0
