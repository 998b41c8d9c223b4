"""write_atomic on a full disk: the error names the file it was writing (run.json, summary.json)."""

from __future__ import annotations

import errno
import os

import pytest

from harness.images.lock import write_atomic


def test_a_full_disk_names_the_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")  # as a close or write says it: no file

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError) as info:
        write_atomic(tmp_path / "summary.json", "{}")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(tmp_path / "summary.json")
    assert str(tmp_path / "summary.json") in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_an_error_that_names_its_file_already_is_kept(tmp_path):
    with pytest.raises(OSError) as info:
        write_atomic(tmp_path, "y")  # a file renamed over a directory: the error's own names
    assert info.value.filename is not None
