"""Private QEMU directories left by a killed harness are swept; nobody else's are touched."""

from __future__ import annotations

import os
import subprocess

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
