"""harness.images.lock: flock-based cache locks between real processes, the cache's one build per
entry, atomic writes, private toolchain build directories, unique run directories, and the JSONL
log on a real full disk (a small tmpfs)."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from harness.deferred.log import EventLog, JsonlFile, LogWriteError, read_events
from harness.images.lock import CacheLockTimeout, cache_lock, lock_holders, parse_proc_locks, write_atomic
from harness.report.rundir import CLAIM, RunDirTaken, new_run_dir, release_if_unused
from tests.support.gating import require
from tests.support.paths import REPO

HOLD = """
import sys, time
from pathlib import Path
from harness.images.lock import cache_lock
with cache_lock(Path(sys.argv[1]), "a test", shared=sys.argv[2] == "shared"):
    print("held", flush=True)
    time.sleep(float(sys.argv[3]))
"""


def _holder(lock: Path, mode: str = "exclusive", seconds: float = 60.0) -> subprocess.Popen:
    """Another process holding ``lock``; returns once it holds it."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(lock), mode, str(seconds)], env=env,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.kill()
    p.wait(timeout=30)


class _Progress(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture
def progress_lines():
    h = _Progress()
    log = logging.getLogger("harness.progress")
    old = log.level
    log.setLevel(logging.DEBUG)
    log.addHandler(h)
    yield h.lines
    log.removeHandler(h)
    log.setLevel(old)


def test_a_waiter_is_bounded_and_names_what_it_waits_for_and_who_holds_it(tmp_path, progress_lines):
    lock = tmp_path / ".k.lock"
    p = _holder(lock)
    try:
        assert lock_holders(lock) == [p.pid]
        t0 = time.monotonic()
        with pytest.raises(CacheLockTimeout) as exc:
            with cache_lock(lock, "kernel X", timeout=0.5):
                pass
        assert 0.5 <= time.monotonic() - t0 < 5
        assert f"pid {p.pid}" in str(exc.value) and "kernel X" in str(exc.value) and str(lock) in str(exc.value)
        assert exc.value.exit_code == 3
        assert any(line.startswith(f"[images] waiting for kernel X: pid {p.pid}") for line in progress_lines), \
            progress_lines
    finally:
        _stop(p)


def test_a_waiter_gets_the_lock_when_the_holder_lets_go(tmp_path, progress_lines):
    lock = tmp_path / ".k.lock"
    p = _holder(lock, seconds=1.0)
    try:
        with cache_lock(lock, "kernel X", timeout=30) as held:
            assert held.waited > 0.2 and held.holders == (p.pid,)
            assert lock_holders(lock) == [os.getpid()]
    finally:
        _stop(p)
    assert any(line.startswith("[images] waited ") and "for kernel X" in line for line in progress_lines)


def test_a_waiter_whose_work_was_done_meanwhile_stops_waiting_without_the_lock(tmp_path, progress_lines):
    import threading

    lock = tmp_path / ".lists.lock"
    done = tmp_path / "updated"
    p = _holder(lock, seconds=60.0)
    timer = threading.Timer(0.5, done.touch)  # the holder's work is done; it keeps the lock
    try:
        t0 = time.monotonic()
        timer.start()
        with cache_lock(lock, "the apt lists", timeout=30, ready=done.exists) as held:
            assert not held.acquired and held.waited > 0.3 and held.holders == (p.pid,)
            assert lock_holders(lock) == [p.pid]  # still the holder's
        assert time.monotonic() - t0 < 10  # not the holder's 60 s
    finally:
        timer.cancel()
        _stop(p)
    assert any("the apt lists done by pid" in line for line in progress_lines), progress_lines


def test_a_dead_holder_does_not_block(tmp_path):
    lock = tmp_path / ".k.lock"
    p = _holder(lock)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=30)
    assert lock.exists()  # the file stays; the kernel dropped the lock with its holder
    with cache_lock(lock, "kernel X", timeout=0.1) as held:
        assert held.waited == 0.0


def test_readers_share_and_a_writer_waits_for_them(tmp_path):
    lock = tmp_path / ".lists.lock"
    p = _holder(lock, "shared")
    try:
        with cache_lock(lock, "the apt lists", shared=True, timeout=0.1) as held:
            assert held.waited == 0.0
            assert sorted(lock_holders(lock)) == sorted([p.pid, os.getpid()])
        with pytest.raises(CacheLockTimeout):
            with cache_lock(lock, "the apt lists", timeout=0.3):
                pass
    finally:
        _stop(p)
    q = _holder(lock, "exclusive")
    try:
        with pytest.raises(CacheLockTimeout):
            with cache_lock(lock, "the apt lists", shared=True, timeout=0.3):
                pass
    finally:
        _stop(q)


def test_locks_are_reentrant_within_a_process(tmp_path):
    lock = tmp_path / ".k.lock"
    with cache_lock(lock, "x"):
        with cache_lock(lock, "x", timeout=0.1):
            with cache_lock(lock, "x", shared=True, timeout=0.1):
                assert lock_holders(lock) == [os.getpid()]
        assert lock_holders(lock) == [os.getpid()]  # still held by the outer block
    assert lock_holders(lock) == []
    with cache_lock(lock, "x", shared=True):
        with pytest.raises(RuntimeError, match="exclusive lock asked for"):
            with cache_lock(lock, "x"):
                pass


def test_proc_locks_lines_are_read_for_holders_only():
    dev = os.makedev(0x08, 0x01)
    text = ("1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF\n"
            "1: -> FLOCK  ADVISORY  WRITE 4343 08:01:1234 0 EOF\n"
            "2: FLOCK  ADVISORY  READ  4444 08:01:1234 0 EOF\n"
            "3: POSIX  ADVISORY  WRITE 4545 08:01:1234 0 EOF\n"
            "4: FLOCK  ADVISORY  WRITE 4646 08:02:1234 0 EOF\n"
            "5: FLOCK  ADVISORY  WRITE 4747 08:01:99 0 EOF\n"
            "garbage\n")
    assert parse_proc_locks(text, dev, 1234) == [4242, 4444]
    assert parse_proc_locks("", dev, 1234) == []


def test_write_atomic_leaves_the_whole_file_and_no_temporary(tmp_path):
    target = tmp_path / "d" / "memo.json"
    write_atomic(target, '{"a": 1}')
    write_atomic(target, b'{"b": 2}')
    assert target.read_text() == '{"b": 2}'
    assert os.listdir(target.parent) == ["memo.json"]


_BUILD_ONE = """
import os, sys, time
from pathlib import Path
from harness.images.cache import cached_dir

def build(tmp):
    with open(Path(os.environ["HARNESS_CACHE"]) / "builds.log", "a") as f:
        f.write(f"{os.getpid()}\\n")
    time.sleep(1.0)
    (tmp / "out").write_text("built")

print(cached_dir("things", "k1", build, what="a thing"))
"""


def test_two_processes_at_once_build_an_entry_once_and_share_it(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "HARNESS_CACHE": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", _BUILD_ONE], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len(set(outs)) == 1 and Path(outs[0], "out").read_text() == "built"
    assert len((tmp_path / "builds.log").read_text().split()) == 1
    assert sorted(p.name for p in (tmp_path / "things").iterdir()) == [".k1.lock", "k1"]


def test_host_toolchain_build_directories_are_private_and_fresh():
    from harness.images.toolchain import Toolchain

    tc = Toolchain("host", Path("/"), "2.40", "12")
    a, a_in = tc.workdir("prog")
    b, b_in = tc.workdir("prog")
    try:
        assert a != b and str(a) == a_in and a.parent == Path(tempfile.gettempdir())
        assert stat.S_IMODE(a.stat().st_mode) == 0o700 and a.name.startswith("harness-build-prog-")
        assert a.name != "prog" and not Path("/tmp/harness-build/prog").exists()
    finally:
        shutil.rmtree(a)
        shutil.rmtree(b)


# -- run directories -----------------------------------------------------------------------------
def _one_run_dir(args) -> str:
    base, now = args
    return str(new_run_dir(None, base=base, now=now))


def test_run_directories_of_one_second_are_distinct_even_from_many_processes_at_once(tmp_path):
    now = time.time()
    with multiprocessing.get_context("fork").Pool(8) as pool:
        dirs = pool.map(_one_run_dir, [(tmp_path, now)] * 16)
    assert len(set(dirs)) == 16
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    assert sorted(Path(d).name for d in dirs) == sorted([stamp] + [f"{stamp}-{n}" for n in range(2, 17)])
    pids = {json.loads((Path(d) / CLAIM).read_text())["pid"] for d in dirs}
    assert len(pids) > 1  # claimed by the processes themselves


def test_a_suffixed_default_name_is_unique_too(tmp_path):
    """kernel-diff's runs/TIMESTAMP-kernel-diff: the same rule, the suffix after the timestamp."""
    a = new_run_dir(None, base=tmp_path, now=1_700_000_000, suffix="-kernel-diff")
    b = new_run_dir(None, base=tmp_path, now=1_700_000_000, suffix="-kernel-diff")
    assert a.name.endswith("-kernel-diff") and b.name == f"{a.name}-2"
    assert (a / CLAIM).exists() and (b / CLAIM).exists()


def test_a_run_directory_that_recorded_nothing_is_released(tmp_path):
    """A run that failed before it recorded anything gives its directory back; one that wrote
    anything (run.json, a log) keeps it."""
    empty = new_run_dir(None, base=tmp_path, now=1_700_000_000)
    assert release_if_unused(empty) and not empty.exists()
    used = new_run_dir(None, base=tmp_path, now=1_700_000_000)
    (used / "run.json").write_text("{}")
    assert not release_if_unused(used) and (used / CLAIM).exists() and (used / "run.json").exists()
    assert not release_if_unused(tmp_path / "never-made")


def test_out_must_be_new_or_empty(tmp_path):
    fresh = new_run_dir(tmp_path / "a" / "b")
    assert fresh.is_dir() and (fresh / CLAIM).exists()
    with pytest.raises(RunDirTaken, match="not empty"):
        new_run_dir(fresh)  # claimed by the first run: never reused
    used = tmp_path / "used"
    used.mkdir()
    (used / "fp-spin.jsonl").write_text("{}\n")
    with pytest.raises(RunDirTaken, match="not empty") as exc:
        new_run_dir(used)
    assert exc.value.exit_code == 2 and "\n" not in str(exc.value)
    assert (used / "fp-spin.jsonl").read_text() == "{}\n"  # nothing of the other run touched
    empty = tmp_path / "empty"
    empty.mkdir()
    assert new_run_dir(empty) == empty
    (tmp_path / "file").write_text("")
    with pytest.raises(RunDirTaken, match="not a directory"):
        new_run_dir(tmp_path / "file")


def test_harness_run_refuses_a_used_out_directory_with_one_line(tmp_path, capsys):
    from harness.cli import main

    used = tmp_path / "used"
    used.mkdir()
    (used / "fp-syscall.jsonl").write_text('{"seq":1}\n')
    assert main(["run", "fp-syscall", "--out", str(used)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"harness run: --out {used}: not empty (a run directory is never reused; name a new or empty one)"]


# -- the JSONL log on a full disk ----------------------------------------------------------------
@pytest.fixture
def small_tmpfs(tmp_path):
    require(os.geteuid() == 0 and shutil.which("mount") is not None, "root and mount(8), to mount a small tmpfs")
    where = tmp_path / "tmpfs"
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(where)],
                       capture_output=True, text=True, timeout=30)
    require(r.returncode == 0, f"mount -t tmpfs: {r.stderr.strip()}")
    try:
        yield where
    finally:
        # lazily: a file the test left open keeps a plain umount busy, and the mount outlived the
        # run (39 of them under /tmp/pytest-of-root after one session's unit runs)
        subprocess.run(["umount", "--lazy", str(where)], timeout=60)


def test_a_full_disk_leaves_whole_lines_and_one_typed_error(small_tmpfs):
    path = small_tmpfs / "fp-spin.jsonl"
    f = JsonlFile(path)
    log = EventLog(f, keep=False)
    log.emit("header", profile="mainline", word_bits=64, max_entries=510, version=2)
    with pytest.raises(LogWriteError) as exc:
        for i in range(10_000):
            log.emit("enter", task=100 + i, entry=i, how="syscall " + "x" * (i % 97))
    err = exc.value
    assert err.exit_code == 3 and "\n" not in str(err)
    assert str(err).startswith(f"cannot write {path}: No space left on device; it keeps its first ")
    assert isinstance(err.__cause__, OSError)
    text = path.read_text()
    assert text.endswith("\n") and len(text) == f.size
    events = list(read_events(text.splitlines()))
    assert len(events) == f.lines == int(str(err).split("first ")[1].split()[0]) > 10
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    # Later writes (an end record, say) fail the same way and leave the file as it was.
    with pytest.raises(LogWriteError):
        log.end("error")
    assert path.read_text() == text
    f.close()
    f.close()  # nothing buffered: closing again is harmless
