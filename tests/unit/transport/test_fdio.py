"""harness/transport/fdio.py on a real socket pair: reads that never wait, writes that wait for
room within a bound."""

from __future__ import annotations

import socket

import pytest

from harness.transport.fdio import nonblocking, read_now, wait_readable, write_all


def test_reads_take_what_is_there_and_never_wait():
    a, b = socket.socketpair()
    with a, b:
        a.settimeout(5.0)  # the socket's own timeout stays for its other users
        fd = nonblocking(a)
        assert a.gettimeout() == 5.0
        assert read_now(fd) is None and not wait_readable(fd, 0)
        b.sendall(b"$OK#9a")
        assert wait_readable(fd, 1.0) and read_now(fd) == b"$OK#9a"
        b.close()
        assert read_now(fd) == b""  # the end of the stream


def test_a_full_buffer_is_waited_for_within_the_bound():
    a, b = socket.socketpair()
    with a, b:
        fd = nonblocking(a)
        write_all(fd, b"x" * 1000, timeout=1.0)
        assert b.recv(2000) == b"x" * 1000
        with pytest.raises(TimeoutError, match="takes no more bytes"):
            write_all(fd, b"y" * (64 << 20), timeout=0.2)  # nobody reads: far past any buffer


def test_a_peer_that_is_gone_is_an_os_error():
    a, b = socket.socketpair()
    with a:
        fd = nonblocking(a)
        b.close()
        with pytest.raises(OSError):
            write_all(fd, b"x", timeout=1.0)
