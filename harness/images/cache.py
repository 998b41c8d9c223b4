"""The on-disk cache that every fetched or built artefact lives in.

Entries are directories keyed by a content hash of their inputs (a package's resolved version
and checksum, a recipe file's bytes, ...).  A build writes into a temporary sibling directory and
renames it into place when it is complete, so an interrupted build never leaves a half entry;
every step that writes the cache holds a file lock (:mod:`harness.images.lock`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ..progress import note, step
from .lock import cache_lock


def cache_root() -> Path:
    """``$HARNESS_CACHE``, else ``$XDG_CACHE_HOME/unwind-harness``, else ``~/.cache/unwind-harness``."""
    env = os.environ.get("HARNESS_CACHE")
    if env:
        root = Path(env)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = Path(xdg) / "unwind-harness"
    root.mkdir(parents=True, exist_ok=True)
    return root


def repo_root() -> Path:
    """The checkout this package runs from (``images/`` and ``guest_programs/`` live there)."""
    return Path(__file__).resolve().parents[2]


def content_key(*parts: object) -> str:
    """A short stable hash of the inputs that define a cache entry."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            part = part.read_bytes() if part.is_file() else str(part)
        if isinstance(part, str):
            part = part.encode()
        if not isinstance(part, bytes):
            part = json.dumps(part, sort_keys=True, default=str).encode()
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()[:16]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def progress(msg: str) -> None:
    """Say one thing about the images once (shown as an ``[images]`` line: harness.progress)."""
    note("images", msg)


def cached_dir(kind: str, key: str, build: Callable[[Path], None], *, what: str) -> Path:
    """Return ``cache/kind/key``, running ``build(tmpdir)`` first when it does not exist yet.

    Concurrent callers (two harnesses on one cache) serialise on the entry's lock file
    (``cache/kind/.key.lock``, :mod:`harness.images.lock`): the first builds, the others wait
    (bounded, saying so on their progress line) and then reuse its entry.  The build writes into
    a temporary directory that is renamed into place only on success.
    """
    final = cache_root() / kind / key
    if (final / ".complete").exists():
        _used(final)
        return final
    with cache_lock(cache_root() / kind / f".{key}.lock", f"another harness building {what}") as held:
        if (final / ".complete").exists():
            if held.waited:
                progress(f"reusing {what} that the other harness built -> {final}")
            _used(final)
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=final.parent))
        with step("images", f"building {what} -> {final}") as st:
            try:
                build(tmp)
                (tmp / ".complete").write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))
                if final.exists():
                    shutil.rmtree(final)
                os.rename(tmp, final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            st.end(f"built {what} in {st.elapsed:.1f}s -> {final}")
    return final


def _used(entry: Path) -> None:
    """Mark an entry used now (its ``.complete``'s mtime), for :func:`prune`."""
    try:
        os.utime(entry / ".complete")
    except OSError:  # a read-only cache: nothing is pruned from it either
        pass


def prune(kind: str, *, keep: int, idle: float) -> list[Path]:
    """Remove the entries of ``kind`` beyond the ``keep`` most recently used that nobody used for
    ``idle`` seconds, and return them.  For kinds whose entries are many and cheap to rebuild
    (an initramfs per batch of a user's or a fuzz campaign's programs: 10 MB each, one per
    program in a live campaign).  ``idle`` keeps an entry a harness has just been handed (its
    QEMU may not have opened it yet) out of reach."""
    entries = []
    for d in (cache_root() / kind).iterdir() if (cache_root() / kind).is_dir() else ():
        try:
            entries.append(((d / ".complete").stat().st_mtime, d))
        except OSError:  # a half entry (no .complete) or a lock file: not ours to judge
            continue
    entries.sort(reverse=True)
    now = time.time()
    removed = []
    for mtime, d in entries[keep:]:
        if now - mtime >= idle:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed
