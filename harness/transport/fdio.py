"""A socket's descriptor read and written directly, non-blocking: the hot paths' I/O (the gdb
stub, :class:`harness.transport.rsp.RspTarget`; the NMI monitor,
:class:`harness.transport.qemu.HmpMonitor`).

Why not the socket object's recv and sendall: a Python socket with a timeout polls before
every recv and every send (CPython's sock_call), one syscall more each time, and a trace makes
about a dozen of them; a blocking socket without a timeout could wait forever.  Here a read
takes what is there or says nothing is, and a write waits for room only when the buffer is
full, within a bound.  Errors stay OSError (TimeoutError for the bound): each caller names its
peer in its own typed error.
"""

from __future__ import annotations

import os
import select
import socket
import time


def nonblocking(sock: socket.socket) -> int:
    """The socket's descriptor, switched to non-blocking (its own timeout, for connect and
    the rest, is left as it was)."""
    fd = sock.fileno()
    os.set_blocking(fd, False)
    return fd


#: bytes one :func:`read_now` takes at most: a read that got fewer took all there was
READ_SIZE = 65536


def read_now(fd: int, size: int = READ_SIZE) -> bytes | None:
    """What has arrived, without waiting: None when nothing has, b"" at the end of the stream."""
    try:
        return os.read(fd, size)
    except BlockingIOError:
        return None


def wait_readable(fd: int, timeout: float) -> bool:
    """Whether bytes (or the end of the stream) arrived within ``timeout`` seconds."""
    return bool(select.select([fd], [], [], max(timeout, 0.0))[0])


def write_all(fd: int, raw: bytes, timeout: float) -> None:
    """Write all of ``raw``.  A full buffer (the peer reads no more) is waited for, ``timeout``
    seconds from the first time it is found full: TimeoutError after that."""
    view = memoryview(raw)
    deadline = None
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            deadline = deadline or time.monotonic() + timeout
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [fd], [], left)[1]:
                raise TimeoutError(f"the peer takes no more bytes ({len(view)} of {len(raw)} unwritten)") from None
