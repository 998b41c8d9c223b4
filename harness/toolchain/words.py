"""The toolchain's own words, parsed: readelf's program headers, sections, symbols and CFI rows,
objdump's disassembly and SFrame function index.

Pure functions of the tools' text (binutils 2.40-2.47 print these alike); each keeps the line it
read a fact from, so a witness can quote the tool.  Tested on the output of the real tools over
real binaries (tests/unit/toolchain/).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["CfiFde", "Insn", "Section", "Segment", "SFrameFde", "Symbol", "cfi_fdes", "disassembly", "program_headers",
           "section_headers", "sframe_fdes", "symbols"]


@dataclass(frozen=True)
class Segment:
    type: str
    offset: int
    vaddr: int
    filesz: int
    memsz: int
    flags: str  # "R E", "RW ", ...
    line: str


_PHDR = re.compile(r"^\s+(\S+)\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)"
                   r"\s+([RWE ]{3})\s+0x([0-9a-f]+)\s*$")


def program_headers(text: str) -> list[Segment]:
    """``readelf -lW``'s program headers."""
    out = []
    for line in text.splitlines():
        m = _PHDR.match(line)
        if m:
            t, off, va, _pa, fs, ms, flg, _al = m.groups()
            out.append(Segment(t, int(off, 16), int(va, 16), int(fs, 16), int(ms, 16), flg, line.strip()))
    return out


@dataclass(frozen=True)
class Section:
    name: str
    type: str
    addr: int
    offset: int
    size: int
    line: str


_SHDR = re.compile(r"^\s*\[\s*(\d+)\]\s+(\S+)\s+(\S+)\s+([0-9a-f]{8,16})\s+([0-9a-f]+)\s+([0-9a-f]+)\s")


def section_headers(text: str) -> list[Section]:
    """``readelf -SW``'s section headers (the null section left out)."""
    out = []
    for line in text.splitlines():
        m = _SHDR.match(line)
        if m and m.group(1) != "0":
            _, name, typ, addr, off, size = m.groups()
            out.append(Section(name, typ, int(addr, 16), int(off, 16), int(size, 16), line.strip()))
    return out


@dataclass(frozen=True)
class Symbol:
    name: str  # without a version (memcpy, not memcpy@@GLIBC_2.14)
    value: int
    size: int
    type: str
    line: str

    @property
    def end(self) -> int:
        return self.value + self.size


_SYM = re.compile(r"^\s*\d+:\s+([0-9a-f]+)\s+(0x[0-9a-f]+|\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)")


def symbols(text: str) -> list[Symbol]:
    """``readelf -sW``'s symbols of every table (.dynsym and .symtab), defined ones only."""
    out = []
    for line in text.splitlines():
        m = _SYM.match(line)
        if not m:
            continue
        value, size, typ, _bind, _vis, ndx, name = m.groups()
        if ndx == "UND":
            continue
        out.append(Symbol(name.split("@", 1)[0], int(value, 16), int(size, 0), typ, line.strip()))
    return out


@dataclass(frozen=True)
class CfiFde:
    offset: int  # the FDE's offset in .eh_frame
    lo: int
    hi: int
    augmentation: str  # its CIE's
    rows: tuple[tuple[int, dict[str, str]], ...]  # (LOC, {column: rule}) in order
    line: str

    def row_at(self, pc: int) -> tuple[int, dict[str, str]] | None:
        found = None
        for loc, row in self.rows:
            if loc <= pc:
                found = (loc, row)
        return found


_CIE = re.compile(r'^([0-9a-f]{8}) ([0-9a-f]+) ([0-9a-f]+) CIE "([^"]*)"')
_FDE = re.compile(r"^([0-9a-f]{8}) ([0-9a-f]+) ([0-9a-f]+) FDE cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+)")


def cfi_fdes(text: str) -> list[CfiFde]:
    """``readelf --debug-dump=frames-interp``'s FDEs, each with its CIE's augmentation and its rows."""
    aug: dict[int, str] = {}
    fdes: list[CfiFde] = []
    cur: dict | None = None
    header: list[str] = []

    def close():
        if cur is not None:
            fdes.append(CfiFde(cur["offset"], cur["lo"], cur["hi"], aug.get(cur["cie"], ""), tuple(cur["rows"]),
                               cur["line"]))

    for line in text.splitlines():
        m = _CIE.match(line)
        if m:
            close()
            cur = None
            aug[int(m.group(1), 16)] = m.group(4)
            continue
        m = _FDE.match(line)
        if m:
            close()
            cur = {"offset": int(m.group(1), 16), "cie": int(m.group(4), 16), "lo": int(m.group(5), 16),
                   "hi": int(m.group(6), 16), "rows": [], "line": line.strip()}
            continue
        s = line.split()
        if s[:2] == ["LOC", "CFA"]:
            header = s
            continue
        if cur is not None and s and len(s) == len(header) and re.fullmatch(r"[0-9a-f]{8,16}", s[0]):
            cur["rows"].append((int(s[0], 16), dict(zip(header[1:], s[1:], strict=True))))
    close()
    return fdes


@dataclass(frozen=True)
class Insn:
    addr: int
    size: int
    mnemonic: str  # with its prefixes: "call", "notrack jmp", "addr32 call"
    operands: str
    line: str

    @property
    def end(self) -> int:
        return self.addr + self.size

    @property
    def target(self) -> str | None:
        """The symbol objdump names as a direct branch's target (``<puts@plt>`` -> ``puts``)."""
        m = re.search(r"<([^>+@]+)(?:@[^>+]*)?(?:\+0x[0-9a-f]+)?>$", self.operands)
        return m.group(1) if m else None


_INSN = re.compile(r"^\s*([0-9a-f]+):\t((?:[0-9a-f]{2} )+)\s*\t?(.*)$")
_PREFIXES = ("addr32", "data16", "notrack", "bnd", "lock", "rep", "repz", "repnz", "ds", "cs", "rex.W", "rex")


def disassembly(text: str) -> list[Insn]:
    """``objdump -d --insn-width=16``'s instructions (raw bytes give each one's size)."""
    out = []
    for line in text.splitlines():
        m = _INSN.match(line)
        if not m:
            continue
        addr, raw, rest = m.groups()
        words = rest.split(None, 1) if rest else []
        mnem = []
        while words and words[0] in _PREFIXES and len(words) > 1:
            mnem.append(words[0])
            words = words[1].split(None, 1)
        mnem.append(words[0] if words else "")
        ops = words[1].strip() if len(words) > 1 else ""
        out.append(Insn(int(addr, 16), len(raw.split()), " ".join(mnem), ops, line.strip()))
    return out


@dataclass(frozen=True)
class SFrameFde:
    index: int
    pc: int
    size: int
    line: str

    @property
    def end(self) -> int:
        return self.pc + self.size


_SFDE = re.compile(r"func idx \[(\d+)\]: pc = 0x([0-9a-f]+), size = (\d+) bytes")


def sframe_fdes(text: str) -> list[SFrameFde]:
    """``objdump --sframe``'s function index: one entry per FDE."""
    return [SFrameFde(int(m.group(1)), int(m.group(2), 16), int(m.group(3)), m.group(0))
            for m in _SFDE.finditer(text)]
