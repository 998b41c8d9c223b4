"""Reading Debian suites other than the host's through a private apt configuration.

The host's own sources are never touched: apt runs with its own sources list, lists and cache
directories under the harness cache.  The archive's address is taken at run time from the
machine's apt sources, so no mirror host name is written into the repository.
"""

from __future__ import annotations

import functools
import glob
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..progress import note, step
from .cache import cache_root
from .errors import ImageError
from .lock import cache_lock, write_atomic

KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
APT_TIMEOUT = 600
#: a waiter's bound on the lists' lock: longer than one apt command may take
LISTS_WAIT = APT_TIMEOUT * 1.5


def _sources_entries() -> list[tuple[str, list[str]]]:
    """(uri, suites) pairs from /etc/apt/sources.list{,.d/*.list,.d/*.sources}."""
    entries: list[tuple[str, list[str]]] = []
    files = ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*"))]
    for name in files:
        try:
            text = Path(name).read_text()
        except OSError:
            continue
        if name.endswith(".sources"):
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                for line in stanza.splitlines():
                    if line.startswith("#") or ":" not in line:
                        continue
                    k, v = line.split(":", 1)
                    fields[k.strip().lower()] = v.strip()
                if "deb" in fields.get("types", "").split() and "uris" in fields:
                    for uri in fields["uris"].split():
                        entries.append((uri, fields.get("suites", "").split()))
        else:
            for line in text.splitlines():
                line = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
                if len(line) >= 3 and line[0] == "deb":
                    entries.append((line[1], [line[2]]))
    return entries


def debian_archive_uri() -> str:
    """The Debian archive the host already uses (the one serving its release, not -security)."""
    for uri, suites in _sources_entries():
        if any(s.split("-")[0] in DEBIAN_CODENAMES and not s.endswith("-security") for s in suites):
            return uri.rstrip("/")
    raise ImageError(
        "no Debian archive found in /etc/apt/sources.list{,.d}: the harness reads other suites "
        "from the archive the host already uses"
    )


DEBIAN_CODENAMES = {"bookworm", "trixie", "forky", "sid", "duke"}

#: Read after the host's configuration (``-c``): the host's hooks after ``apt-get update``
#: (appstream's catalogue refresh, PackageKit's notice) are about the host's own lists, not
#: these private ones; appstreamcli alone took 2 s of each update here.
PRIVATE_CONF = """\
#clear APT::Update::Post-Invoke-Success;
#clear APT::Update::Post-Invoke;
#clear APT::Update::Pre-Invoke;
"""


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    suite: str
    filename: str  # path of the .deb inside the archive
    sha256: str


class PrivateApt:
    """apt-get/apt-cache over chosen suites, with state kept under ``cache/apt``.

    The lists are shared by every harness on the cache: ``apt-get update`` holds
    ``cache/apt/.lists.lock`` exclusively (apt's own lock would make a second one fail at once),
    every other apt command holds it shared (they read the lists and apt's binary caches), so a
    harness that finds the lists stale while another updates them waits and then reuses them.
    """

    def __init__(self, suites: tuple[str, ...] = ("bookworm", "trixie", "trixie-backports", "sid")):
        self.suites = suites
        self.root = cache_root() / "apt"
        self.uri = debian_archive_uri()
        for sub in ("lists/partial", "cache/archives/partial"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.sources = self.root / "sources.list"
        self.lock = self.root / ".lists.lock"
        text = "".join(f"deb [signed-by={KEYRING}] {self.uri} {s} main\n" for s in suites)
        if not self.sources.exists() or self.sources.read_text() != text:
            with cache_lock(self.lock, "the apt lists (another harness is updating them)", timeout=LISTS_WAIT):
                if not self.sources.exists() or self.sources.read_text() != text:
                    write_atomic(self.sources, text)
                    (self.root / "updated").unlink(missing_ok=True)
        self.conf = self.root / "apt.conf"
        if not self.conf.exists() or self.conf.read_text() != PRIVATE_CONF:
            write_atomic(self.conf, PRIVATE_CONF)

    def _opts(self) -> list[str]:
        return [
            f"-c={self.conf}",
            f"-o=Dir::Etc::sourcelist={self.sources}",
            "-o=Dir::Etc::sourceparts=-",
            f"-o=Dir::State::Lists={self.root / 'lists'}",
            f"-o=Dir::Cache={self.root / 'cache'}",
            # sid's Release file can read as expired against a machine clock that runs ahead.
            "-o=Acquire::Check-Valid-Until=false",
            "-o=APT::Get::AllowUnauthenticated=false",
            # apt's binary caches of the lists, kept beside them: a host that turns them off
            # (Debian's container images: docker-clean sets both to "") would make every
            # apt-cache call parse the four suites' lists again, about 2 s of CPU each, about
            # ten calls to resolve a kernel and QEMU after an update (benchmarks/SUITE_TIME.md)
            "-o=Dir::Cache::pkgcache=pkgcache.bin",
            "-o=Dir::Cache::srcpkgcache=srcpkgcache.bin",
        ]

    def _run(self, tool: str, *args: str, cwd: Path | None = None) -> str:
        """Run an apt command that reads the lists (the lists' lock held shared)."""
        with cache_lock(self.lock, "the apt lists (another harness is updating them)", shared=True,
                        timeout=LISTS_WAIT):
            return self._run_unlocked(tool, *args, cwd=cwd)

    def _run_unlocked(self, tool: str, *args: str, cwd: Path | None = None) -> str:
        cmd = [tool, *self._opts(), *args]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=APT_TIMEOUT, cwd=cwd)
        except subprocess.TimeoutExpired as exc:
            raise ImageError(f"{' '.join(cmd)} timed out after {APT_TIMEOUT}s") from exc
        if r.returncode != 0:
            raise ImageError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
        return r.stdout

    def fresh(self, max_age: float = 6 * 3600) -> bool:
        stamp = self.root / "updated"
        try:
            return time.time() - stamp.stat().st_mtime < max_age
        except FileNotFoundError:
            return False

    def update(self, max_age: float = 6 * 3600) -> None:
        """``apt-get update`` when the lists are older than ``max_age``; a harness that finds
        another updating them waits for it and then takes its lists as they are."""
        if self.fresh(max_age):
            return
        with cache_lock(self.lock, "the apt lists (another harness is updating them)", timeout=LISTS_WAIT,
                        ready=lambda: self.fresh(max_age)) as held:
            if self.fresh(max_age):
                if held.waited:
                    note("images", f"apt lists updated by the other harness, reused ({self.root / 'lists'})")
                return
            with step("images", f"apt-get update for {', '.join(self.suites)} from the host's Debian archive") as st:
                self._run_unlocked("apt-get", "update")
                st.end(f"apt-get update for {', '.join(self.suites)} done in {st.elapsed:.1f}s")
            (self.root / "updated").touch()

    def versions(self, name: str) -> list[tuple[str, str]]:
        """(version, suite) for every version of ``name`` the configured suites offer."""
        self.update()
        out = self._run("apt-cache", "madison", name)
        found = []
        for ln in out.splitlines():
            cols = [c.strip() for c in ln.split("|")]
            if len(cols) >= 3 and cols[0] == name:
                m = re.search(r"\s(\S+)/main\s", " " + cols[2] + " ")
                if m:
                    found.append((cols[1], m.group(1)))
        return found

    def package(self, name: str, suite: str) -> Package:
        """The newest version of ``name`` that ``suite`` itself offers."""
        versions = sorted((v for v, s in self.versions(name) if s == suite), key=_vkey)
        if not versions:
            raise ImageError(f"package {name} not found in suite {suite} of {self.uri}")
        version = versions[-1]
        fields = self._fields(name, version)
        return Package(name, version, suite, fields.get("Filename", ""), fields.get("SHA256", ""))

    def _fields(self, name: str, version: str) -> dict[str, str]:
        out = self._run("apt-cache", "show", f"{name}={version}")
        stanza = out.strip().split("\n\n")[0]
        return {
            k.strip(): v.strip()
            for k, v in (ln.split(":", 1) for ln in stanza.splitlines() if ":" in ln and not ln.startswith(" "))
        }

    def depends(self, name: str, version: str) -> list[str]:
        deps = self._fields(name, version).get("Depends", "")
        return [d.strip().split()[0] for d in deps.split(",") if d.strip()]

    def download(self, pkg: Package, dest: Path) -> Path:
        """Download the .deb of exactly ``pkg`` into ``dest`` and return its path."""
        dest.mkdir(parents=True, exist_ok=True)
        with step("images", f"downloading {pkg.name}={pkg.version} ({pkg.suite})") as st:
            self._run("apt-get", "download", f"{pkg.name}={pkg.version}", cwd=dest)
            debs = sorted(dest.glob(f"{pkg.name}_*.deb"))
            if not debs:
                raise ImageError(f"apt-get download {pkg.name}={pkg.version} produced no .deb in {dest}")
            st.end(f"downloaded {debs[-1].name} ({debs[-1].stat().st_size / 1e6:.1f} MB) in {st.elapsed:.1f}s")
        return debs[-1]

    def download_closure(self, pkg: Package, dest: Path, keep: tuple[str, ...]) -> list[Path]:
        """Download ``pkg`` and everything it depends on (no recommends) as if nothing were
        installed, into ``dest``; versions come from ``pkg.suite`` where it has them (``-t``, as
        one installs from backports), otherwise from the suites in ``keep`` (all others pinned
        away).  apt's state for this (an empty dpkg status, its locks) stays in ``dest``."""
        state = dest / ".apt"
        (state / "preferences.d").mkdir(parents=True, exist_ok=True)
        (dest / "partial").mkdir(parents=True, exist_ok=True)
        (state / "status").write_text("")
        (state / "preferences").write_text("".join(
            f"Package: *\nPin: release n={s}\nPin-Priority: -1\n\n" for s in self.suites if s not in keep))
        st = step("images", f"downloading {pkg.name}={pkg.version} ({pkg.suite}) and its dependencies")
        with st:
            self._download_closure(pkg, dest, state)
            debs = sorted(dest.glob("*.deb"))
            st.end(f"downloaded {pkg.name}={pkg.version} and its dependencies: {len(debs)} packages, "
                   f"{sum(d.stat().st_size for d in debs) / 1e6:.1f} MB in {st.elapsed:.1f}s")
        if not any(d.name.startswith(f"{pkg.name}_") for d in debs):
            raise ImageError(f"apt-get --download-only {pkg.name}={pkg.version} left no {pkg.name} .deb in {dest}")
        return debs

    def _download_closure(self, pkg: Package, dest: Path, state: Path) -> None:
        self._run("apt-get",
                  f"-o=Dir::State::status={state / 'status'}",
                  f"-o=Dir::Etc::preferences={state / 'preferences'}",
                  f"-o=Dir::Etc::preferencesparts={state / 'preferences.d'}",
                  f"-o=Dir::Cache::archives={dest}",
                  "-o=APT::Architectures=amd64",
                  "install", "-y", "-q", "--download-only", "--no-install-recommends",
                  "-t", pkg.suite, f"{pkg.name}={pkg.version}")


def _vkey(version: str):
    """Sort key for Debian version strings, ordered by dpkg itself."""
    return functools.cmp_to_key(_vercmp)(version)


def _vercmp(a: str, b: str) -> int:
    r = subprocess.run(["dpkg", "--compare-versions", a, "lt", b], timeout=30)
    if r.returncode == 0:
        return -1
    r = subprocess.run(["dpkg", "--compare-versions", a, "eq", b], timeout=30)
    return 0 if r.returncode == 0 else 1


def run_tool(cmd: list[str], what: str, error: type[ImageError], timeout: int = 120) -> subprocess.CompletedProcess:
    """``cmd`` run to completion (bounded); a missing tool, a timeout or a failure raise ``error``
    naming ``what``."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as exc:
        raise error(f"{what}: {cmd[0]} is not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise error(f"{what}: timed out after {timeout}s") from exc
    if r.returncode != 0:
        raise error(f"{what} failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-2000:]}")
    return r


def unpack_closure(apt: PrivateApt, pkg: Package, tmp: Path, keep: tuple[str, ...],
                   error: type[ImageError]) -> tuple[Path, list[Path]]:
    """``pkg`` and its dependency closure (from the suites in ``keep``) downloaded and unpacked
    with ``dpkg-deb -x`` into ``tmp/root``, documentation, man pages and locales dropped: the
    root and the .debs it was made of (already removed)."""
    debs_dir = tmp / "debs"
    try:
        debs = apt.download_closure(pkg, debs_dir, keep=keep)
    except ImageError as exc:
        raise error(f"apt could not fetch {pkg.name}={pkg.version} from {pkg.suite} with its "
                    f"dependencies: {exc}") from exc
    root = tmp / "root"
    root.mkdir()
    with step("images", f"unpacking {len(debs)} packages into {root}", total=len(debs)) as st:
        for i, deb in enumerate(debs, 1):
            run_tool(["dpkg-deb", "-x", str(deb), str(root)], f"dpkg-deb -x {deb.name}", error)
            st.update(f"unpacking {len(debs)} packages into {root}: {i} done", i, len(debs))
        st.end(f"unpacked {len(debs)} packages in {st.elapsed:.1f}s")
    shutil.rmtree(debs_dir)
    for sub in ("usr/share/doc", "usr/share/man", "usr/share/locale", "usr/share/lintian"):
        shutil.rmtree(root / sub, ignore_errors=True)
    return root, debs
