"""The kernel's own copy of the vDSO image, and guest memory whose vDSO range is served from it.

A process maps the vDSO's pages only as it touches them, so the image read through the process
(for its .eh_frame, .dynsym and section headers) can fault on a page the process never used.  The
pages are the kernel's ``struct vdso_image`` data either way (arch/x86/include/asm/vdso.h: ``void
*data; unsigned long size; ...``), found by symbol: ``vdso_image_64`` / ``vdso_image_32`` up to
6.x, ``vdso64_image`` / ``vdso32_image`` in 7.x.

Domain code: the kernel is read through a ``read(addr, size)`` callable; its read errors (a
:class:`~harness.memory.MemoryFault`, or the transport's) propagate to the caller.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from ..memory import BufferMemory, Memory, MemoryFault, Overlay
from ..unwind.maps import VDSO, parse_maps
from . import Read

__all__ = ["kernel_vdso_image", "vdso_backed", "with_kernel_vdso"]


def kernel_vdso_image(read: Read, symbols: Mapping[str, int], bits: int, max_size: int) -> bytes | None:
    """The kernel's ``bits``-bit vDSO image, or None where the kernel has no such symbol, its size
    is 0 or more than ``max_size`` (the mapping's length), or the bytes are not an ELF file."""
    sym = symbols.get(f"vdso_image_{bits}") or symbols.get(f"vdso{bits}_image")
    if sym is None:
        return None
    data, size = struct.unpack("<QQ", read(sym, 16))
    if not 0 < size <= max_size:
        return None
    image = read(data, size)
    if image[:4] != b"\x7fELF":
        return None
    return image


def vdso_backed(memory: Memory, start: int, image: bytes) -> Overlay:
    """``memory`` with ``[start, start + len(image))`` served from ``image``: a read wholly inside
    the image comes from it, any other read from ``memory``."""
    return Overlay(BufferMemory({start: image}), memory)


def with_kernel_vdso(memory: Memory, maps: str, read: Read, symbols: Mapping[str, int], bits: int,
                     unreadable: tuple[type[BaseException], ...] = (MemoryFault,)) -> Memory:
    """``memory`` with the task's vDSO mapping (from its ``/proc/PID/maps`` text) served from the
    kernel's image, where the kernel has one; ``memory`` itself where it has none or a read of the
    kernel raises one of ``unreadable`` (the caller's transport errors, say)."""
    vdso = next((m for m in parse_maps(maps) if m.path == VDSO), None)
    if vdso is None:
        return memory
    try:
        image = kernel_vdso_image(read, symbols, bits, vdso.end - vdso.start)
    except unreadable:
        return memory
    return memory if image is None else vdso_backed(memory, vdso.start, image)
