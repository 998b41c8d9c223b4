"""Parse the text of ``objdump --sframe`` (libsframe's ``dump_sframe``), binutils 2.40 to 2.47.

The format, from libsframe/sframe-dump.c and the output of each toolchain::

    Contents of the SFrame section .sframe:
      Header :

        Version: SFRAME_VERSION_3
        Flags: SFRAME_F_FDE_SORTED,                  <- 2.46+: one flag a line, comma-joined
               SFRAME_F_FDE_FUNC_START_PCREL
        CFA fixed RA offset: -8                      <- 2.41+ only (2.40 never prints it)
        Num FDEs: 7
        Num FREs: 25

      Function Index :

        func idx [7]: pc = 0x132f, size = 151 bytes, attr = "F"     <- attr: S signal, F flex (V3)
        STARTPC[m]      CFA       FP        RA                      <- [m]: PCMASK FDE
        000000000000132f  sp+8      u         f                    <- default FDE
        0000000000001334  r10+0     (fp+0)    U                    <- flex: reg+off, (deref), U pad
        0000000000001207  RA undefined                             <- outermost frame (V2+)

A PCMASK FDE's STARTPC column shows the raw FRE start offset, any other the absolute address.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_FUNC_RE = re.compile(
    r"^\s*func idx \[(?P<idx>\d+)\]: pc = 0x(?P<pc>[0-9a-f]+), size = (?P<size>\d+) bytes"
    r"(?:, attr = \"(?P<attr>[A-Z]*)\")?(?:, pauth = (?P<pauth>[AB]) key)?\s*$")
_STARTPC_RE = re.compile(r"^\s*STARTPC(?P<mask>\[m\])?\s+CFA\s+FP\s+RA\s*$")
_FRE_RE = re.compile(r"^\s*(?P<pc>[0-9a-f]{16})\s+(?P<rest>.*?)\s*$")


@dataclass
class ObjdumpFRE:
    startpc: int  # absolute (PCINC) or the raw start offset (PCMASK), as printed
    cfa: str | None  # "sp+16", "r10+0", "(fp-16)"; None for "RA undefined"
    fp: str | None
    ra: str | None  # "f", "u", "U", "c-8", "(c-8)" ...; the "[s]" mark is split off
    ra_mangled: bool = False

    @property
    def ra_undefined(self) -> bool:
        return self.cfa is None


@dataclass
class ObjdumpFunction:
    idx: int
    pc: int
    size: int
    attrs: str = ""
    pauth_b: bool = False
    pcmask: bool = False
    fres: list[ObjdumpFRE] = field(default_factory=list)


@dataclass
class ObjdumpSFrame:
    section: str
    version: str  # "SFRAME_VERSION_2"
    flags: list[str]
    cfa_fixed_fp_offset: int | None
    cfa_fixed_ra_offset: int | None
    num_fdes: int
    num_fres: int
    functions: list[ObjdumpFunction]
    note: str = ""  # "No further information can be displayed..." for unsupported versions


class ObjdumpParseError(ValueError):
    pass


def parse_objdump_sframe(text: str) -> list[ObjdumpSFrame]:
    """Every SFrame section dumped in ``text``."""
    out: list[ObjdumpSFrame] = []
    cur: ObjdumpSFrame | None = None
    func: ObjdumpFunction | None = None
    in_flags = False
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s:
            in_flags = False
            continue
        m = re.match(r"^Contents of the SFrame section (\S+):$", s)
        if m:
            cur = ObjdumpSFrame(m.group(1), "", [], None, None, -1, -1, [])
            out.append(cur)
            func = None
            continue
        if cur is None:
            continue  # the file name line, "file format ..."
        if s.startswith("Flags:"):
            in_flags = True
            _add_flags(cur, s[len("Flags:"):])
            continue
        if in_flags and re.match(r"^[A-Z0-9_,]+$", s) and not s.startswith("Num"):
            _add_flags(cur, s)
            continue
        in_flags = False
        if s in ("Header :", "Function Index :"):
            continue
        kv = re.match(r"^(Version|CFA fixed FP offset|CFA fixed RA offset|Num FDEs|Num FREs): (.*)$", s)
        if kv:
            key, val = kv.groups()
            if key == "Version":
                cur.version = val
            elif key == "CFA fixed FP offset":
                cur.cfa_fixed_fp_offset = int(val)
            elif key == "CFA fixed RA offset":
                cur.cfa_fixed_ra_offset = int(val)
            elif key == "Num FDEs":
                cur.num_fdes = int(val)
            else:
                cur.num_fres = int(val)
            continue
        if s.startswith("No further information can be displayed"):
            cur.note = s
            continue
        m = _FUNC_RE.match(line)
        if m:
            func = ObjdumpFunction(int(m.group("idx")), int(m.group("pc"), 16), int(m.group("size")),
                                   m.group("attr") or "", m.group("pauth") == "B")
            cur.functions.append(func)
            continue
        m = _STARTPC_RE.match(line)
        if m:
            if func is None:
                raise ObjdumpParseError(f"line {lineno}: STARTPC header outside a function: {line!r}")
            func.pcmask = m.group("mask") is not None
            continue
        m = _FRE_RE.match(line)
        if m and func is not None:
            func.fres.append(_parse_fre(int(m.group("pc"), 16), m.group("rest"), lineno))
            continue
        raise ObjdumpParseError(f"line {lineno}: unexpected {line!r}")
    return out


def _add_flags(cur: ObjdumpSFrame, text: str) -> None:
    for name in text.replace(",", " ").split():
        if name != "NONE":
            cur.flags.append(name)


def _parse_fre(pc: int, rest: str, lineno: int) -> ObjdumpFRE:
    if rest == "RA undefined":
        return ObjdumpFRE(pc, None, None, None)
    cols = rest.split()
    if len(cols) != 3:
        raise ObjdumpParseError(f"line {lineno}: FRE with {len(cols)} columns: {rest!r}")
    cfa, fp, ra = cols
    mangled = ra.endswith("[s]")
    if mangled:
        ra = ra[:-3]
    return ObjdumpFRE(pc, cfa, fp, ra, mangled)


# --------------------------------------------------------------------------- comparison


def render_fre(section, fde, fre) -> ObjdumpFRE:
    """How the objdump of the toolchain that wrote ``section`` prints our decoded ``fre``.

    Version quirks (from each binutils' sframe-dump.c and its output): 2.40 (V1) prints "u" for
    an RA the header fixes, 2.41+ print "f"; flexible FDEs print the control word's register
    ("sp", "fp", "rN", "c" for the CFA) and parenthesise a dereference.
    """
    h = section.header
    startpc = fre.start if fde.pcmask else fde.func_start + fre.start
    if fre.cfa is None:
        return ObjdumpFRE(startpc, None, None, None)
    if not fde.flex:
        cfa = f"{fre.base_reg}+{fre.cfa.offset}"
        fixed_ra = h.cfa_fixed_ra_offset != 0
        fp = _saved(fre.fp, fre.datawords[1 if fixed_ra else 2]) if fre.fp is not None else "u"
        if fre.ra_padding:
            ra = "U"
        elif fre.ra is not None:
            ra = _saved(fre.ra, fre.datawords[1])
        elif h.version >= 2 and h.cfa_fixed_ra_offset != 0:
            ra = "f"
        else:
            ra = "u"
    else:
        cfa = _disp(fre.cfa)
        fp = _disp(fre.fp) if fre.fp is not None else "u"
        if fre.ra_padding:
            ra = "U"
        elif fre.ra is not None:
            ra = _disp(fre.ra)
        else:
            ra = "f" if h.cfa_fixed_ra_offset != 0 else "u"
    return ObjdumpFRE(startpc, cfa, fp, ra, fre.mangled_ra)


def _saved(loc, stored: int) -> str:
    """A default FDE's RA/FP column: ``c-8`` (saved at CFA-8), or ``rN`` where an s390x V2 offset
    names the register holding the value (libsframe prints the register of ``stored >> 1``)."""
    return f"c{loc.offset:+d}" if loc.deref else f"r{stored >> 1}"


def _disp(loc) -> str:
    reg = "c" if loc.base == "cfa" else loc.base
    return f"({reg}{loc.offset:+d})" if loc.deref else f"{reg}{loc.offset:+d}"


def compare(section, dump: ObjdumpSFrame) -> list[str]:
    """Differences between our decoding of ``section`` and objdump's ``dump`` of it (empty: equal)."""
    h = section.header
    errs: list[str] = []

    def check(what: str, ours, theirs) -> None:
        if ours != theirs:
            errs.append(f"{what}: ours {ours!r}, objdump {theirs!r}")

    check("version", f"SFRAME_VERSION_{h.version}", dump.version)
    check("flags", sorted(h.flag_names()), sorted(dump.flags))
    if h.version >= 2:  # 2.40 prints neither fixed offset
        check("CFA fixed RA offset", h.cfa_fixed_ra_offset or None, dump.cfa_fixed_ra_offset)
        check("CFA fixed FP offset", h.cfa_fixed_fp_offset or None, dump.cfa_fixed_fp_offset)
    check("Num FDEs", h.num_fdes, dump.num_fdes)
    check("Num FREs", h.num_fres, dump.num_fres)
    check("functions dumped", len(section.fdes), len(dump.functions))
    for fde, fn in zip(section.fdes, dump.functions, strict=False):
        where = f"func idx [{fn.idx}]"
        check(f"{where} index", fde.index, fn.idx)
        check(f"{where} pc", hex(fde.func_start), hex(fn.pc))
        check(f"{where} size", fde.func_size, fn.size)
        check(f"{where} [m]", fde.pcmask, fn.pcmask)
        attrs = ("S" if fde.signal_frame else "") + ("F" if fde.flex else "")
        check(f"{where} attr", attrs, fn.attrs)
        fres = section.fres(fde)
        check(f"{where} number of FREs", len(fres), len(fn.fres))
        for k, (fre, theirs) in enumerate(zip(fres, fn.fres, strict=False)):
            check(f"{where} FRE {k}", render_fre(section, fde, fre), theirs)
    return errs
