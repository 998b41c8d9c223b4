"""harness.images.cache.prune: entries beyond the newest KEEP that idled long enough go; the
newest, the recently used, half-built entries and lock files stay."""

from __future__ import annotations

import os
import time

from harness.images.cache import cached_dir, prune


def _entry(name: str, age: float) -> None:
    d = cached_dir("things", name, lambda tmp: (tmp / "x").write_text(name), what=name)
    t = time.time() - age
    os.utime(d / ".complete", (t, t))


def test_prune_keeps_the_newest_and_the_recently_used(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    for i, age in enumerate([10, 1000, 9000, 100, 7000]):
        _entry(f"e{i}", age)
    (tmp_path / "things" / ".half.tmp").mkdir()  # a build in progress: no .complete
    removed = prune("things", keep=2, idle=3600)
    assert sorted(p.name for p in removed) == ["e2", "e4"]  # e0, e3 the newest; e1 idled too little
    left = sorted(p.name for p in (tmp_path / "things").iterdir() if not p.name.startswith("."))
    assert left == ["e0", "e1", "e3"]
    assert (tmp_path / "things" / ".half.tmp").is_dir()


def test_an_entry_used_again_is_new_again(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    _entry("old", 9000)
    _entry("new", 10)
    cached_dir("things", "old", lambda tmp: None, what="old")  # a hit marks it used
    assert prune("things", keep=0, idle=3600) == []
    assert prune("things", keep=0, idle=0) != []
