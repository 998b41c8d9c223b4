"""harness.memory's Overlay and harness.kernel.vdso: one memory over another, the kernel's vDSO
image found through its ``struct vdso_image``."""

from __future__ import annotations

import struct

import pytest

from harness.kernel.vdso import kernel_vdso_image, vdso_backed
from harness.memory import BufferMemory, MemoryFault, Overlay
from tests.support.gating import require


class Counting:
    def __init__(self, inner):
        self.inner = inner
        self.reads = []

    def read(self, addr, size):
        self.reads.append((addr, size))
        return self.inner.read(addr, size)


def test_overlay_reads_first_and_falls_back_to_second():
    first = BufferMemory({0x1000: b"A" * 16})
    second = Counting(BufferMemory({0x0FF0: b"b" * 64}))
    o = Overlay(first, second)
    assert o.read(0x1000, 16) == b"A" * 16 and second.reads == []  # wholly in first: second not asked
    assert o.read(0x0FF0, 4) == b"bbbb"  # below first
    assert o.read(0x1008, 16) == b"b" * 16  # straddles first's end: all from second, never stitched
    assert o.read(0x1010, 8) == b"b" * 8  # past first


def test_overlay_fault_is_the_seconds():
    o = Overlay(BufferMemory({0x1000: b"A" * 16}), BufferMemory({0x2000: b"b" * 16}))
    with pytest.raises(MemoryFault) as exc:
        o.read(0x3000, 8)
    assert exc.value.addr == 0x3000
    with pytest.raises(MemoryFault) as exc:
        o.read(0x2008, 16)  # second has 8 of the 16 bytes: it names its first unreadable address
    assert exc.value.addr == 0x2010


def test_overlay_does_not_swallow_other_errors_of_first():
    class Broken:
        def read(self, addr, size):
            raise OSError("transport gone")

    with pytest.raises(OSError):
        Overlay(Broken(), BufferMemory({0: b"x"})).read(0, 1)


ELF = b"\x7fELF" + bytes(60)
SYM, DATA, VDSO = 0xFFFFFFFF82000000, 0xFFFFFFFF82100000, 0x7FFFF7FC1000


def kernel(size=None, image=ELF):
    return BufferMemory({SYM: struct.pack("<QQ", DATA, len(ELF) if size is None else size), DATA: image})


@pytest.mark.parametrize("name", ["vdso_image_64", "vdso64_image"])  # up to 6.x, and 7.x
def test_kernel_vdso_image(name):
    k = kernel()
    assert kernel_vdso_image(k.read, {name: SYM}, 64, 0x2000) == ELF
    assert kernel_vdso_image(k.read, {name: SYM}, 32, 0x2000) is None  # no 32-bit symbol


def test_kernel_vdso_image_refuses_what_is_not_the_mapping():
    assert kernel_vdso_image(kernel().read, {"vdso_image_64": SYM}, 64, len(ELF) - 1) is None  # larger
    assert kernel_vdso_image(kernel(size=0).read, {"vdso_image_64": SYM}, 64, 0x2000) is None
    assert kernel_vdso_image(kernel(image=b"\0" * 64).read, {"vdso_image_64": SYM}, 64, 0x2000) is None
    with pytest.raises(MemoryFault):  # read errors are the caller's to handle
        kernel_vdso_image(BufferMemory().read, {"vdso_image_64": SYM}, 64, 0x2000)


def test_vdso_backed_serves_the_image_over_the_process():
    process = BufferMemory({VDSO: b"p" * 0x100, 0x400000: b"text"})
    m = vdso_backed(process, VDSO, ELF)
    assert m.read(VDSO, 4) == b"\x7fELF"
    assert m.read(VDSO + len(ELF) - 4, 8) == b"pppppppp"  # past the image's end: the process
    assert m.read(0x400000, 4) == b"text"


def test_file_backed_memory_serves_read_only_file_mappings():
    from pathlib import Path

    from harness.unwind.maps import AddressSpace, FileBackedMemory, load_image, parse_maps

    path = next((Path(p).resolve() for p in ("/usr/bin/true", "/bin/true", "/usr/bin/env") if Path(p).is_file()), None)
    require(path is not None, "no system binary to map")
    img = load_image(path)
    base = 0x555555554000 if img.is_pie_or_shared else 0
    lines = [f"{base + (s.vaddr & ~0xFFF):x}-{base + ((s.vaddr + s.memsz + 0xFFF) & ~0xFFF):x} r-xp "
             f"{s.offset & ~0xFFF:08x} 08:01 1 {path}" for s in img.segments if s.p_type == "PT_LOAD"]
    lines.append("7ffff7ff0000-7ffff7ff1000 rw-p 00000000 00:00 0")
    first = parse_maps("\n".join(lines))[0]
    m = FileBackedMemory(AddressSpace(parse_maps("\n".join(lines)), lambda p: p))
    assert m.read(first.start, 16) == img.data[first.offset:first.offset + 16]
    with pytest.raises(MemoryFault):
        m.read(0x7FFFF7FF0000, 8)  # anonymous, writable: not in any file
    with pytest.raises(MemoryFault):
        m.read(first.end - 4, 8)  # past the mapping's end
