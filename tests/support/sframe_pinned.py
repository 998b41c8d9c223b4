"""Real .sframe sections written by each Debian toolchain, and the text that same toolchain's
``objdump --sframe`` printed for them, verbatim in tests/data/sframe-pinned/ (captured once;
tests/unit/sframe/test_elf_toolchains.py rebuilds them and re-runs the tools live).  They run
everywhere, without the toolchain roots: the decoder's pinned tests, its property tests and the
fuzz seeds start from them."""

from __future__ import annotations

from typing import NamedTuple

from tests.support.paths import TEST_DATA


def _objdump(name: str) -> str:
    """tests/data/sframe-pinned/NAME.objdump: the toolchain's ``objdump --sframe FILE``, verbatim
    (its file line and trailing blanks included; FILE is the program's file name)."""
    return (TEST_DATA / "sframe-pinned" / f"{name}.objdump").read_text()


class Pinned(NamedTuple):
    what: str
    vaddr: int
    data: bytes
    objdump: str  # objdump's text, verbatim

    @property
    def file(self) -> str:
        """The file name objdump printed (its second line: ``FILE:     file format ...``)."""
        return self.objdump.splitlines()[1].split(":", 1)[0]


PINNED = {
    "v1": Pinned(
        "host (binutils 2.40): callchain [fp-sframe-dyn-64]",
        0x2188,
        bytes.fromhex(
            "e2de01010300f80006000000160000004f000000000000006600000098eeffff10000000430000000200000000a8eeff"
            "ff40000000490000000200000010e1efffff9500000000000000050000000076f0ffff0b000000120000000400000000"
            "81f0ffff0b0000002100000004000000008cf0ffffbf0000003000000005000000000003080a0510f00d0410f0930508"
            "f0940308000308010510f0040410f00a0508f0000308010510f0040410f00a0508f0000308010510f0040410f0530508"
            "f0540410f00003100603180003080b0310"
        ),
        _objdump("v1"),
    ),
    "v2": Pinned(
        "trixie (binutils 2.44): callchain [fp-sframe-dyn-64]",
        0x2188,
        bytes.fromhex(
            "e2de02010300f800070000001700000052000000000000008c00000098eeffff10000000430000000200000000100000"
            "a8eeffff40000000490000000200000010100000e8eeffff080000004f0000000100000010080000e1efffff95000000"
            "00000000050000000000000076f0ffff0b00000012000000040000000000000081f0ffff0b0000002100000004000000"
            "000000008cf0ffffbf0000003000000005000000000000000003080a0510f00d0410f0930508f0940308000308010510"
            "f0040410f00a0508f0000308010510f0040410f00a0508f0000308010510f0040410f0530508f0540410f00003100603"
            "180003080b0310000310"
        ),
        _objdump("v2"),
    ),
    "v3": Pinned(
        "sid (binutils 2.47.50): callchain [fp-sframe-dyn-64]",
        0x2198,
        bytes.fromhex(
            "e2de03050300f80007000000190000007d00000000000000700000006ceeffffffffffff100000005f0000006ceeffff"
            "ffffffff400000006a0000009ceeffffffffffff080000007500000085efffffffffffff7300000000000000e8efffff"
            "ffffffff0b00000017000000e3efffffffffffff0b0000002b000000deefffffffffffffcf0000003f00000005000000"
            "00000308060510f0090410f0710508f07203080400000000000308010510f0040410f00a0508f0040000000000030801"
            "0510f0040410f00a0508f00700000000000308010510f0040410f0560508f0570410f0c60410f0ca0410f00200000000"
            "00031006031802001000100003080b03100100100008000310"
        ),
        _objdump("v3"),
    ),
    "v3odd": Pinned(
        "sid (binutils 2.47.50): sframe_odd -O1 -fomit-frame-pointer, dynamic",
        0x21f8,
        bytes.fromhex(
            "e2de03050300f8000900000023000000b500000000000000900000000ceeffffffffffff10000000970000000ceeffff"
            "ffffffffb0000000a2000000aceeffffffffffff08000000ad000000bcefffffffffffff0600000000000000b2efffff"
            "ffffffff030000000f000000a5efffffffffffffea000000190000007ff0ffffffffffff3c00000049000000abf0ffff"
            "ffffffff970000005d00000032f1ffffffffffff66000000860000000300800000000308010510f00503080200000000"
            "00030801000b00000000000308020310040318050520e0060528e00d25b000e0ffe30528e0e40520e0e50518e0e70510"
            "e0e90508e00400000000000308010510f0040410f03b0508f006000001000004390805045100110a5100003300150a33"
            "f00033008f0a5100003300960a390800330004000000000003080103104e03084f031002000000000003100603180200"
            "1000100003080b03100100100008000310"
        ),
        _objdump("v3odd"),
    ),
}
