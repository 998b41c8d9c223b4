"""File locks around the steps that write the shared image cache, and atomic small writes.

Two harnesses on one cache (two ``harness run``, two ``harness images build``, a test suite next
to a run) must neither build one entry twice at once nor read what the other is half-way
through writing.  Every shared cache step takes a lock file next to what it writes:

============================  ===========  ==================================================
``cache/KIND/.KEY.lock``      exclusive    building a kernel, toolchain root, QEMU root, guest
                                           program or initramfs (:func:`cache.cached_dir`)
``cache/apt/.lists.lock``     exclusive    ``apt-get update`` of the private lists
                              shared       every other apt command (they read the lists)
``cache/kallsyms/.SHA.lock``  exclusive    dumping a kernel's /proc/kallsyms, its symbol file
``cache/.kvm-probe.lock``     exclusive    the KVM probe's memo
============================  ===========  ==================================================

Why ``fcntl.flock`` and not the ``filelock`` package: the apt lists need a shared mode (many
readers, one ``apt-get update``), which ``filelock.FileLock`` has not (its ``ReadWriteLock``
goes through SQLite); flock's locks belong to the open file and the kernel drops them when the
holder dies, however it dies, so a stale lock file of a killed harness never blocks anyone and
needs no clean-up; and it is in the standard library (``filelock`` is in the venv only as tox's
dependency).  Lock files are never removed: removing one while another process waits on it
would let a third lock a new file of the same name.

A waiter polls with ``LOCK_NB`` (so the wait is bounded and never needs a signal), shows on
its progress line what it waits for and which process holds the lock (from ``/proc/locks``),
and gives up with :class:`CacheLockTimeout` after ``timeout`` seconds.  Then it re-checks what
the holder built, and reuses it.

Within one process the locks are re-entrant (a count per lock file): an exclusive holder may
take the same lock again in either mode; a shared holder asking for exclusive is a bug
(converting a flock is not atomic) and raises ``RuntimeError``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..progress import step
from .errors import ImageError

__all__ = ["CacheLockTimeout", "DEFAULT_WAIT", "Held", "cache_lock", "lock_holders", "parse_proc_locks",
           "write_atomic"]

#: how long a waiter waits by default: longer than the longest step that holds a lock
#: (debootstrap's own limit is 1,200 s)
DEFAULT_WAIT = 1800.0
POLL_MAX = 0.5  # seconds between two tries, at most


class CacheLockTimeout(ImageError):
    """Another harness held a cache lock for longer than the waiter's bound; names the lock,
    what it guards and who holds it."""


@dataclass
class Held:
    """What :func:`cache_lock` yields: the lock file and how long the caller waited for it."""

    path: Path
    waited: float = 0.0  # seconds; 0.0 when the lock was free at once
    holders: tuple[int, ...] = ()  # pids that held it when this caller started waiting
    acquired: bool = True  # False: ``ready()`` came true while waiting, and the lock is not held


# path -> [fd, exclusive, count]: the locks this process holds (flock locks of one process on
# two open files of one path would block each other, so a nested take reuses the first).
_held: dict[str, list] = {}
_held_guard = threading.Lock()


@contextlib.contextmanager
def cache_lock(path: Path, what: str, *, shared: bool = False, timeout: float = DEFAULT_WAIT,
               topic: str = "images", ready: Callable[[], bool] | None = None) -> Iterator[Held]:
    """Hold the flock on ``path`` (created if missing) for the block; ``what`` says what it
    guards, for the waiting line and the timeout's message ("the apt lists", "kernel X").

    ``ready``: asked between two tries while waiting; once it says True (what the caller wanted
    done has been done by the holder: the apt lists are fresh), the wait ends and the block runs
    *without* the lock (``Held.acquired`` False).  A waiter for an exclusive lock that the holder
    keeps taking shared again between short commands would otherwise wait for all of them."""
    path = Path(path)
    key = os.path.abspath(path)
    with _held_guard:
        mine = _held.get(key)
        if mine is not None:
            if mine[1] is False and not shared:
                raise RuntimeError(f"{path}: exclusive lock asked for while this process holds it shared")
            mine[2] += 1
    if mine is not None:
        try:
            yield Held(path)
        finally:
            with _held_guard:
                mine[2] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        held = _acquire(fd, path, what, shared, timeout, topic, ready)
        if not held.acquired:
            yield held
            return
        with _held_guard:
            _held[key] = [fd, not shared, 1]
        try:
            yield held
        finally:
            with _held_guard:
                del _held[key]
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _acquire(fd: int, path: Path, what: str, shared: bool, timeout: float, topic: str,
             ready: Callable[[], bool] | None) -> Held:
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    if _try(fd, mode):
        return Held(path)
    holders = tuple(lock_holders(path))
    who = _describe(holders)
    start = time.monotonic()
    deadline = start + timeout
    delay = 0.02
    with step(topic, f"waiting for {what}: {who} holds {path}") as st:
        while not _try(fd, mode):
            if ready is not None and ready():
                st.end(f"waited {st.elapsed:.1f}s: {what} done by {who}")
                return Held(path, time.monotonic() - start, holders, acquired=False)
            left = deadline - time.monotonic()
            if left <= 0:
                raise CacheLockTimeout(f"waited {timeout:.0f}s for {what}: {who} still holds {path}")
            time.sleep(min(delay, left))
            delay = min(delay * 2, POLL_MAX)
        st.end(f"waited {st.elapsed:.1f}s for {what} ({who} held {path.name})")
    return Held(path, time.monotonic() - start, holders)


def _try(fd: int, mode: int) -> bool:
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


# -- who holds a lock ----------------------------------------------------------------------------
def parse_proc_locks(text: str, dev: int, ino: int) -> list[int]:
    """The pids holding a flock on the file (``dev``, ``ino``), from ``/proc/locks`` text.

    A line is ``N: FLOCK  ADVISORY  WRITE PID MAJ:MIN:INODE START END`` (major and minor in hex,
    fs/locks.c lock_get_status()); ``N: -> FLOCK ...`` lines are waiters, not holders.
    """
    want = (os.major(dev), os.minor(dev), ino)
    pids: list[int] = []
    for line in text.splitlines():
        f = line.split()
        if len(f) < 6 or f[1] == "->" or f[1] != "FLOCK":
            continue
        try:
            pid = int(f[4])
            maj, mn, inode = f[5].split(":")
            if (int(maj, 16), int(mn, 16), int(inode)) == want and pid not in pids:
                pids.append(pid)
        except ValueError:
            continue
    return pids


def lock_holders(path: Path) -> list[int]:
    """Pids holding a flock on ``path`` (empty if unknown: no /proc/locks, or it went away)."""
    try:
        st = os.stat(path)
        text = Path("/proc/locks").read_text()
    except OSError:
        return []
    return parse_proc_locks(text, st.st_dev, st.st_ino)


def _describe(pids: tuple[int, ...]) -> str:
    if not pids:
        return "another process"
    out = []
    for pid in pids[:3]:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            cmd = " ".join(a.decode(errors="replace") for a in argv if a)[:80]
        except OSError:
            cmd = ""
        out.append(f"pid {pid}" + (f" ({cmd})" if cmd else ""))
    return ", ".join(out)


# -- small files written whole -------------------------------------------------------------------
def write_atomic(path: Path, data: str | bytes) -> None:
    """Write ``path`` so that a reader sees the old content or the new, never a part: a unique
    temporary file in the same directory, renamed over it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None and exc.errno is not None:
            # A full disk says "[Errno 28] No space left on device" at the write or the close,
            # with no file: this names the one that was being written.
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
