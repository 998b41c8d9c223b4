"""The console drain thread reads QEMU's pty and never reaps the process: only its owner
(Machine.close) waits for it.  pexpect's read_nonblocking calls isalive() (a waitpid) at EOF, and
two threads waiting for one child raced in a suite run (ptyprocess: "There was no child process.
Did someone else call waitpid() on our process?")."""

from __future__ import annotations

import os
import threading
import time

import pexpect

from harness.transport.qemu import Console


def test_the_console_reads_to_the_end_and_leaves_the_child_to_its_owner(tmp_path):
    child = pexpect.spawn("/bin/sh", ["-c", "echo one; echo two; exit 3"], echo=False)
    cond = threading.Condition()
    console = Console(child, tmp_path / "console.log", cond)
    with cond:
        assert cond.wait_for(lambda: console.eof, timeout=10), "the drain never saw the end of the stream"
    console._thread.join(timeout=5)
    assert not console._thread.is_alive()
    assert console.tail() == ["one", "two"]
    # the exited shell is still ours to reap (looked at with WNOWAIT: left waitable): the drain
    # thread waited for nothing
    deadline = time.monotonic() + 10
    info = os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    while info is None and time.monotonic() < deadline:
        time.sleep(0.01)
        info = os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    assert info is not None and info.si_pid == child.pid and info.si_status == 3
    child.close(force=True)  # the owner reaps it
    assert child.exitstatus == 3
    assert (tmp_path / "console.log").read_text().replace("\r", "") == "one\ntwo\n"
