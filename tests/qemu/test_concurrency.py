"""Two harnesses at once on one cache, and a run on a full disk (issue #14, items 2 and 3).

Every process here is a real ``harness`` command line; the cache is a real one (a fresh
temporary ``HARNESS_CACHE``, or one whose apt lists are made 7 hours old), and the full disk
is a real tmpfs mounted by the test.  The timings print (``-s``) and are never asserted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.deferred.log import read_events
from harness.images.cache import cache_root
from harness.report.rundir import CLAIM
from tests.support.gating import require

pytestmark = pytest.mark.qemu

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 1500  # one command's bound, on a loaded machine


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def _harness(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness.cli", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _finish(procs: list[subprocess.Popen]) -> list[tuple[int, str, str]]:
    out = []
    deadline = time.monotonic() + TIMEOUT
    try:
        for p in procs:
            o, e = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            out.append((p.returncode, o, e))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    return out


def test_two_image_builds_at_once_on_a_fresh_cache(tmp_path):
    """apt lists + a kernel + the host's programs + an initramfs, built by two harnesses started
    together on an empty cache: both succeed, each step ran once, the second reused it."""
    require(shutil.which("apt-get") is not None and shutil.which("dpkg-deb") is not None, "apt-get, dpkg-deb")
    cache = tmp_path / "cache"
    env = _env(HARNESS_CACHE=str(cache))
    args = ("images", "build", "--kernel", "default", "--toolchain", "host", "--qemu", "host")
    t0 = time.monotonic()
    results = _finish([_harness(*args, cwd=tmp_path, env=env), _harness(*args, cwd=tmp_path, env=env)])
    seconds = time.monotonic() - t0
    for rc, out, err in results:
        assert rc == 0, f"exit {rc}\n{out}\n{err[-4000:]}"
        assert "Traceback" not in err
    # Both report the same kernel and initramfs.
    kernels = {re.search(r"^kernel default: .*$", out, re.M).group(0) for _, out, _ in results}
    initrds = {re.search(r"^initramfs: (.*)$", out, re.M).group(1) for _, out, _ in results}
    assert len(kernels) == 1 and len(initrds) == 1, (kernels, initrds)
    stderr = "".join(err for _, _, err in results)
    # apt-get update and the kernel's build ran once; the other harness waited for each.
    assert stderr.count("apt-get update for") and len(re.findall(r"apt-get update for .* done in", stderr)) == 1, stderr
    assert len(re.findall(r"built kernel .* in", stderr)) == 1, stderr
    assert len(re.findall(r"built initramfs .* in", stderr)) == 1, stderr
    assert "waited " in stderr and "waiting for " in stderr, stderr
    assert len([p for p in (cache / "kernels").iterdir() if not p.name.startswith(".")]) == 1
    leftovers = [p for kind in ("kernels", "programs", "initramfs") for p in (cache / kind).iterdir()
                 if p.name.startswith(".") and not p.name.endswith(".lock")]
    assert not leftovers, leftovers  # no half-built temporary entries
    waits = re.findall(r"\[images\] waited .*", stderr)
    print(f"\ntwo `harness images build {' '.join(args[2:])}` at once on a fresh cache: {seconds:.1f}s "
          f"(machine loaded); the waits:\n  " + "\n  ".join(waits))


def _stale_cache(tmp_path: Path) -> Path:
    """A cache of its own whose apt lists are 7 hours old: the apt state copied, every built
    entry reached through a link to the shared cache (nothing is rebuilt)."""
    shared = cache_root()
    require((shared / "apt" / "updated").exists(), f"apt lists in {shared} (run ./dev run or harness images build)")
    cache = tmp_path / "cache"
    cache.mkdir()
    for entry in shared.iterdir():
        if entry.name == "apt":
            # not apt's binary caches (*.bin, 185 MB): the stale lists below invalidate them anyway
            shutil.copytree(entry, cache / "apt", ignore=shutil.ignore_patterns("lock", ".*.lock", "*.bin"))
        elif entry.is_dir():
            (cache / entry.name).symlink_to(entry)
        elif entry.name.endswith(".json"):
            shutil.copy(entry, cache / entry.name)
    old = time.time() - 7 * 3600
    for p in [cache / "apt" / "updated", *(cache / "apt" / "lists").iterdir()]:
        os.utime(p, (old, old))
    return cache


def test_two_runs_at_once_in_one_directory_with_stale_apt_lists(tmp_path):
    """Two ``harness run`` started together in one directory on one cache whose apt lists are
    older than 6 hours: one updates the lists, the other waits and reuses them; both succeed,
    each in a run directory of its own with its own complete logs."""
    cache = _stale_cache(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    env = _env(HARNESS_CACHE=str(cache))
    args = ("run", "fp-syscall", "--samples", "20", "--accel", "tcg")
    t0 = time.monotonic()
    procs = [_harness(*args, cwd=work, env=env), _harness(*args, cwd=work, env=env)]
    results = _finish(procs)
    seconds = time.monotonic() - t0
    dirs = []
    for p, (rc, out, err) in zip(procs, results, strict=True):
        assert rc == 0, f"exit {rc}\n{out}\n{err[-4000:]}"
        assert "Traceback" not in err
        d = work / re.search(r"logs in (\S+)/$", out, re.M).group(1)
        dirs.append(d)
        # The directory is this process's: its claim names its pid.
        assert json.loads((d / CLAIM).read_text())["pid"] == p.pid
        lines = (d / "fp-syscall.jsonl").read_text().splitlines()
        events = list(read_events(lines))
        assert events[0]["ev"] == "header" and events[-1]["ev"] == "end"
        assert events[-1]["reason"] == "complete", events[-1]
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        stacks = [e for e in events if e["ev"] == "stack"]
        assert stacks and events[-1]["stacks"] == len(stacks)
        assert json.loads((d / "summary.json").read_text())["exit_code"] == 0
    assert dirs[0] != dirs[1] and sorted(p.name for p in (work / "runs").iterdir()) == sorted(d.name for d in dirs)
    stderr = "".join(err for _, _, err in results)
    assert len(re.findall(r"apt-get update for .* done in", stderr)) == 1, stderr
    assert "waited " in stderr and "the apt lists" in stderr, stderr
    assert time.time() - (cache / "apt" / "updated").stat().st_mtime < 3600
    print(f"\ntwo `harness {' '.join(args)}` at once, apt lists 7 h old: {seconds:.1f}s (machine loaded); "
          f"run directories {[d.name for d in dirs]}; "
          + "; ".join(re.findall(r"\[images\] waited [^\n]*", stderr)))


def _mount_tmpfs(where: Path, size: str) -> None:
    require(os.geteuid() == 0 and shutil.which("mount") is not None, "root and mount(8), to mount a small tmpfs")
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                       capture_output=True, text=True, timeout=30)
    require(r.returncode == 0, f"mount -t tmpfs: {r.stderr.strip()}")


def test_a_full_disk_ends_the_run_with_one_line_and_whole_log_lines(tmp_path):
    full = tmp_path / "full"
    _mount_tmpfs(full, "48k")
    try:
        t0 = time.monotonic()
        (rc, out, err), = _finish([_harness("run", "fp-syscall", "--samples", "400", "--accel", "tcg",
                                            "--out", str(full / "run"), cwd=tmp_path, env=_env())])
        seconds = time.monotonic() - t0
        assert rc == 3, f"exit {rc}\n{out}\n{err[-4000:]}"
        assert "Traceback" not in err, err[-4000:]
        # The partial table is printed (stdout), with the error in its scenario's lines, and
        # the exit line says why; summary.json could not be written on the full disk either.
        assert "fp-syscall" in out and "divergences by cause" in out, out
        last = next(line for line in out.splitlines() if "cannot write" in line)
        assert re.fullmatch(r"fp-syscall: cannot write \S+fp-syscall\.jsonl: No space left on device; "
                            r"it keeps its first \d+ whole line\(s\)", last), last
        assert out.strip().splitlines()[-1].startswith("exit 3:"), out[-2000:]
        text = (full / "run" / "fp-syscall.jsonl").read_text()
        assert text.endswith("\n")
        events = list(read_events(text.splitlines()))  # every line whole and valid
        kept = int(re.search(r"first (\d+) whole", last).group(1))
        assert len(events) == kept and [e["seq"] for e in events] == list(range(1, kept + 1))
        assert events[-1]["ev"] != "end"  # cut: a reader can tell
        print(f"\nfull disk (tmpfs 48k): exit {rc} after {seconds:.1f}s (machine loaded), {kept} whole lines kept; "
              f"the table's error line: {last}")
    finally:
        subprocess.run(["umount", str(full)], timeout=60)
