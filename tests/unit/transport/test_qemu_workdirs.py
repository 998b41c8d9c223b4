"""Private QEMU directories left by a killed harness are swept; nobody else's are touched."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from harness.transport.qemu import WORKDIR_PREFIX, sweep_orphan_workdirs


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_only_directories_of_dead_owners_are_removed(tmp_path):
    dead, alive, ownerless, garbled = (tmp_path / f"{WORKDIR_PREFIX}{n}" for n in ("dead", "alive", "none", "bad"))
    for d in (dead, alive, ownerless, garbled):
        d.mkdir()
        (d / "console.log").write_text("x")
    (dead / "owner").write_text(f"{_dead_pid()}\n")
    (alive / "owner").write_text(f"{os.getpid()}\n")
    (garbled / "owner").write_text("")  # being written by a harness that is starting
    other = tmp_path / "unrelated"
    other.mkdir()
    (other / "owner").write_text(f"{_dead_pid()}\n")

    assert sweep_orphan_workdirs(tmp_path) == [dead]
    assert not dead.exists()
    assert alive.exists() and ownerless.exists() and garbled.exists() and other.exists()


def test_a_temporary_directory_too_long_for_the_sockets_falls_back_to_tmp(tmp_path, monkeypatch):
    """QEMU's sockets live in the guest's private directory: under a $TMPDIR too deep for a Unix
    socket's 107 bytes (a test runner's), the directory goes to /tmp; a short $TMPDIR is kept."""
    import socket
    import tempfile

    from harness.transport.qemu import SOCKET_PATH_MAX, workdir_base

    deep = tmp_path / ("d" * 60)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    assert workdir_base() == Path("/tmp")
    # the limit is the kernel's: a socket at the longest path allowed binds, one byte more does not
    short = tmp_path.parent / "s"
    short.mkdir(exist_ok=True)
    monkeypatch.setattr(tempfile, "tempdir", str(short))
    assert workdir_base() == short
    name = "/tmp/" + "x" * (SOCKET_PATH_MAX - len("/tmp/"))
    for path, ok in ((name, True), (name + "y", False)):
        s = socket.socket(socket.AF_UNIX)
        try:
            s.bind(path)
            assert ok, path
        except OSError:
            assert not ok, path
        finally:
            s.close()
            if os.path.exists(path):
                os.unlink(path)
