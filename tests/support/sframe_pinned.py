"""Real .sframe sections written by each Debian toolchain, and the text that same toolchain's
``objdump --sframe`` printed for them (captured once; tests/unit/sframe/test_elf_toolchains.py
re-runs the tools live).  They run everywhere, without the toolchain roots: the decoder's pinned
tests, its property tests and the fuzz seeds start from them."""

from __future__ import annotations

from typing import NamedTuple

class Pinned(NamedTuple):
    what: str
    vaddr: int
    data: bytes
    objdump: str


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
        """\


Contents of the SFrame section .sframe:
  Header :

    Version: SFRAME_VERSION_1
    Flags: SFRAME_F_FDE_SORTED
    Num FDEs: 6
    Num FREs: 22

  Function Index :

    func idx [0]: pc = 0x1020, size = 16 bytes
    STARTPC         CFA       FP        RA
    0000000000001020  sp+16     u         u
    0000000000001026  sp+24     u         u

    func idx [1]: pc = 0x1030, size = 64 bytes
    STARTPC[m]      CFA       FP        RA
    0000000000000000  sp+8      u         u
    000000000000000b  sp+16     u         u

    func idx [2]: pc = 0x1169, size = 149 bytes
    STARTPC         CFA       FP        RA
    0000000000001169  sp+8      u         u
    0000000000001173  sp+16     c-16      u
    0000000000001176  fp+16     c-16      u
    00000000000011fc  sp+8      c-16      u
    00000000000011fd  sp+8      u         u

    func idx [3]: pc = 0x11fe, size = 11 bytes
    STARTPC         CFA       FP        RA
    00000000000011fe  sp+8      u         u
    00000000000011ff  sp+16     c-16      u
    0000000000001202  fp+16     c-16      u
    0000000000001208  sp+8      c-16      u

    func idx [4]: pc = 0x1209, size = 11 bytes
    STARTPC         CFA       FP        RA
    0000000000001209  sp+8      u         u
    000000000000120a  sp+16     c-16      u
    000000000000120d  fp+16     c-16      u
    0000000000001213  sp+8      c-16      u

    func idx [5]: pc = 0x1214, size = 191 bytes
    STARTPC         CFA       FP        RA
    0000000000001214  sp+8      u         u
    0000000000001215  sp+16     c-16      u
    0000000000001218  fp+16     c-16      u
    0000000000001267  sp+8      c-16      u
    0000000000001268  fp+16     c-16      u
""",
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
        """\


Contents of the SFrame section .sframe:
  Header :

    Version: SFRAME_VERSION_2
    Flags: SFRAME_F_FDE_SORTED
    CFA fixed RA offset: -8
    Num FDEs: 7
    Num FREs: 23

  Function Index :

    func idx [0]: pc = 0x1020, size = 16 bytes
    STARTPC         CFA       FP        RA
    0000000000001020  sp+16     u         f
    0000000000001026  sp+24     u         f

    func idx [1]: pc = 0x1030, size = 64 bytes
    STARTPC[m]      CFA       FP        RA
    0000000000000000  sp+8      u         f
    000000000000000b  sp+16     u         f

    func idx [2]: pc = 0x1070, size = 8 bytes
    STARTPC[m]      CFA       FP        RA
    0000000000000000  sp+16     u         f

    func idx [3]: pc = 0x1169, size = 149 bytes
    STARTPC         CFA       FP        RA
    0000000000001169  sp+8      u         f
    0000000000001173  sp+16     c-16      f
    0000000000001176  fp+16     c-16      f
    00000000000011fc  sp+8      c-16      f
    00000000000011fd  sp+8      u         f

    func idx [4]: pc = 0x11fe, size = 11 bytes
    STARTPC         CFA       FP        RA
    00000000000011fe  sp+8      u         f
    00000000000011ff  sp+16     c-16      f
    0000000000001202  fp+16     c-16      f
    0000000000001208  sp+8      c-16      f

    func idx [5]: pc = 0x1209, size = 11 bytes
    STARTPC         CFA       FP        RA
    0000000000001209  sp+8      u         f
    000000000000120a  sp+16     c-16      f
    000000000000120d  fp+16     c-16      f
    0000000000001213  sp+8      c-16      f

    func idx [6]: pc = 0x1214, size = 191 bytes
    STARTPC         CFA       FP        RA
    0000000000001214  sp+8      u         f
    0000000000001215  sp+16     c-16      f
    0000000000001218  fp+16     c-16      f
    0000000000001267  sp+8      c-16      f
    0000000000001268  fp+16     c-16      f
""",
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
        """\


Contents of the SFrame section .sframe:
  Header :

    Version: SFRAME_VERSION_3
    Flags: SFRAME_F_FDE_SORTED,
           SFRAME_F_FDE_FUNC_START_PCREL
    CFA fixed RA offset: -8
    Num FDEs: 7
    Num FREs: 25

  Function Index :

    func idx [0]: pc = 0x1020, size = 16 bytes
    STARTPC         CFA       FP        RA
    0000000000001020  sp+16     u         f
    0000000000001026  sp+24     u         f

    func idx [1]: pc = 0x1030, size = 64 bytes
    STARTPC[m]      CFA       FP        RA
    0000000000000000  sp+8      u         f
    000000000000000b  sp+16     u         f

    func idx [2]: pc = 0x1070, size = 8 bytes
    STARTPC[m]      CFA       FP        RA
    0000000000000000  sp+16     u         f

    func idx [3]: pc = 0x1169, size = 115 bytes
    STARTPC         CFA       FP        RA
    0000000000001169  sp+8      u         f
    000000000000116f  sp+16     c-16      f
    0000000000001172  fp+16     c-16      f
    00000000000011da  sp+8      c-16      f
    00000000000011db  sp+8      u         f

    func idx [4]: pc = 0x11dc, size = 11 bytes
    STARTPC         CFA       FP        RA
    00000000000011dc  sp+8      u         f
    00000000000011dd  sp+16     c-16      f
    00000000000011e0  fp+16     c-16      f
    00000000000011e6  sp+8      c-16      f

    func idx [5]: pc = 0x11e7, size = 11 bytes
    STARTPC         CFA       FP        RA
    00000000000011e7  sp+8      u         f
    00000000000011e8  sp+16     c-16      f
    00000000000011eb  fp+16     c-16      f
    00000000000011f1  sp+8      c-16      f

    func idx [6]: pc = 0x11f2, size = 207 bytes
    STARTPC         CFA       FP        RA
    00000000000011f2  sp+8      u         f
    00000000000011f3  sp+16     c-16      f
    00000000000011f6  fp+16     c-16      f
    0000000000001248  sp+8      c-16      f
    0000000000001249  fp+16     c-16      f
    00000000000012b8  fp+16     c-16      f
    00000000000012bc  fp+16     c-16      f
""",
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
        """\


Contents of the SFrame section .sframe:
  Header :

    Version: SFRAME_VERSION_3
    Flags: SFRAME_F_FDE_SORTED,
           SFRAME_F_FDE_FUNC_START_PCREL
    CFA fixed RA offset: -8
    Num FDEs: 9
    Num FREs: 35

  Function Index :

    func idx [0]: pc = 0x1020, size = 16 bytes
    STARTPC         CFA       FP        RA
    0000000000001020  sp+16     u         f
    0000000000001026  sp+24     u         f

    func idx [1]: pc = 0x1030, size = 176 bytes
    STARTPC[m]      CFA       FP        RA
    0000000000000000  sp+8      u         f
    000000000000000b  sp+16     u         f

    func idx [2]: pc = 0x10e0, size = 8 bytes
    STARTPC[m]      CFA       FP        RA
    0000000000000000  sp+16     u         f

    func idx [3]: pc = 0x1200, size = 6 bytes, attr = "S"
    STARTPC         CFA       FP        RA
    0000000000001200  sp+8      u         f
    0000000000001201  sp+16     c-16      f
    0000000000001205  sp+8      u         f

    func idx [4]: pc = 0x1206, size = 3 bytes
    STARTPC         CFA       FP        RA
    0000000000001206  sp+8      u         f
    0000000000001207  RA undefined

    func idx [5]: pc = 0x1209, size = 234 bytes
    STARTPC         CFA       FP        RA
    0000000000001209  sp+8      u         f
    000000000000120b  sp+16     u         f
    000000000000120d  sp+24     u         f
    000000000000120e  sp+32     c-32      f
    000000000000120f  sp+40     c-32      f
    0000000000001216  sp+176    c-32      f
    00000000000012ec  sp+40     c-32      f
    00000000000012ed  sp+32     c-32      f
    00000000000012ee  sp+24     c-32      f
    00000000000012f0  sp+16     c-32      f
    00000000000012f2  sp+8      c-32      f

    func idx [6]: pc = 0x12f3, size = 60 bytes
    STARTPC         CFA       FP        RA
    00000000000012f3  sp+8      u         f
    00000000000012f4  sp+16     c-16      f
    00000000000012f7  fp+16     c-16      f
    000000000000132e  sp+8      c-16      f

    func idx [7]: pc = 0x132f, size = 151 bytes, attr = "F"
    STARTPC         CFA       FP        RA
    000000000000132f  sp+8      u         f
    0000000000001334  r10+0     u         f
    0000000000001340  r10+0     (fp+0)    U
    0000000000001344  (fp-16)   (fp+0)    U
    00000000000013be  r10+0     (fp+0)    U
    00000000000013c5  sp+8      (fp+0)    U

    func idx [8]: pc = 0x13c6, size = 102 bytes
    STARTPC         CFA       FP        RA
    00000000000013c6  sp+8      u         f
    00000000000013c7  sp+16     u         f
    0000000000001414  sp+8      u         f
    0000000000001415  sp+16     u         f
""",
    ),
}
