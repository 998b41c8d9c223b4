"""A static checker of a linked binary's SFrame section: no guest, structured results only.

:func:`check_binary` reads one ELF file and returns a :class:`BinaryCheck`: what was checked
(FDEs, FREs compared with the DWARF CFI) and a list of :class:`Finding`, each of one kind
from :data:`KINDS`.  Rendering lives in :mod:`harness.report.sframe`, the command in
:mod:`harness.commands.sframe`.  It lives in unwind/, above sframe/, because it reads both sides:
the SFrame section (:mod:`harness.sframe`) and the DWARF CFI (:mod:`.cfi`).

The checks, in the order they run:

* header -- ``FDE_SORTED`` must be set in a linked section; ``FDE_FUNC_START_PCREL`` must be
  set in V3 (gas and ld 2.46+ always set it) and in V2 when the producer is binutils 2.45 or
  later (``expect_binutils``; a V2 section does not say which binutils wrote it, so without
  that hint a V2 section without the flag is accepted as 2.41-2.44 output and a note says so);
  AMD64 fixes the RA at CFA-8 and the FP at no fixed place.
* FDE table -- in ascending order of function start (``fde-order``) and no two functions
  overlapping (``fde-overlap``); each function inside an executable PT_LOAD segment
  (``fde-outside-text``); where a function symbol (``.symtab``/``.dynsym``, STT_FUNC or
  STT_GNU_IFUNC) starts at the FDE's start its size must be the FDE's (``fde-symbol``), and an FDE
  must not start inside a sized function symbol that starts elsewhere (``fde-symbol`` too).
* FREs -- each FRE start inside its function (PCINC: below ``func_size``; PCMASK: below the
  repetition block) and after the previous one (``fre-start``); FRE data that does not decode
  (``fre-decode``).
* rules -- each FRE's CFA, RA and FP rules equal the ``.eh_frame`` row for every address the
  FRE covers (``cfa``, ``ra``, ``fp``; ``signal`` for V3's signal-frame bit against the CIE's
  "S" augmentation); an FRE covering an address no CFI row describes is ``no-cfi``.  Both sides
  are :class:`harness.rule.FrameRule` values: SFrame's through :meth:`SFrameSection.rule`, the
  CFI's through :meth:`CFITable.rule_for_link`.  An RA-undefined FRE (the outermost frame) has no
  CFA or FP, so only its RA is compared.  The comparison runs at every FRE start and at every
  CFI row start inside an FRE's range; for a PCMASK FDE (PLT stubs, whose CFA expression depends
  on the PC) at every address of the function.

Input that cannot be read at all -- no such file, not ELF, no SFrame section, a header or FDE
table that does not decode -- raises :class:`SFrameError` (the CLI's exit code 2).
"""

from __future__ import annotations

import bisect
import itertools
import os
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from elftools.common.exceptions import ELFError

from ..rule import UNDEFINED, FrameRule
from ..sframe import format as F
from ..sframe.elf import SFrameTable
from ..sframe.errors import SFrameError
from ..sframe.parse import SFrameFDE, SFrameFRE, SFrameSection
from .cfi import CFITable, UnsupportedCFI, cfi_table
from .maps import ElfImage, MapsError

__all__ = ["KINDS", "RULE_KINDS", "BinaryCheck", "Finding", "check_binary", "check_table", "load"]


# Every kind of finding, with a one-line description (the report prints them in this order).
KINDS = {
    "header": "header field or flag wrong for a linked section",
    "fde-order": "FDEs not in ascending order of function start",
    "fde-overlap": "two FDEs cover the same address",
    "fde-outside-text": "function not inside an executable PT_LOAD segment",
    "fde-symbol": "function start or size differs from the function symbol",
    "fre-start": "FRE start outside its function or not after the previous FRE",
    "fre-decode": "FRE data does not decode",
    "cfa": "CFA rule differs from .eh_frame",
    "ra": "RA rule differs from .eh_frame",
    "fp": "FP rule differs from .eh_frame",
    "signal": "signal-frame mark differs from .eh_frame",
    "no-cfi": "SFrame describes an address .eh_frame does not",
}
RULE_KINDS = ("cfa", "ra", "fp", "signal")

# The binutils release from which V2 sections carry FDE_FUNC_START_PCREL (errata 1).
PCREL_V2_SINCE = (2, 45)
AMD64_FIXED_RA = -8


@dataclass(frozen=True)
class Finding:
    """One violation or disagreement.  ``addr``/``end``: the address range at fault (link-time);
    ``sframe``/``cfi``: the two rules of a rule disagreement, else None."""

    kind: str
    message: str
    fde: int | None = None  # index in the section's FDE table
    fre: int | None = None  # index in the FDE's FREs
    addr: int | None = None
    end: int | None = None
    sframe: FrameRule | None = None
    cfi: FrameRule | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown finding kind {self.kind!r}")


@dataclass
class BinaryCheck:
    path: str
    version: int
    flags: list[str]
    via: str  # "section" or "PT_GNU_SFRAME"
    num_fdes: int
    num_fres: int
    fres_checked: int = 0  # FREs whose every covered address was compared with a CFI row
    addresses_compared: int = 0
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.findings

    def by_kind(self) -> Counter:
        return Counter(f.kind for f in self.findings)

    def of_kind(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]


def load(path: str | os.PathLike, *, strict: bool = False) -> tuple[SFrameTable, ElfImage]:
    """The SFrame table and ELF image of the file at ``path``.

    Raises :class:`SFrameError` naming what is wrong with the input: no such file, not a
    regular file, unreadable, not ELF, no SFrame section, a header or FDE table that does not
    decode.  Other OS errors (an I/O error, ...) propagate: they are not the input's fault.
    """
    path = Path(path)
    if not path.exists():
        raise SFrameError(f"{path}: no such file", field="file")
    if not path.is_file():
        raise SFrameError(f"{path}: not a regular file", field="file")
    try:
        table = SFrameTable.from_elf(path, strict=strict)
        image = ElfImage.from_path(path)
        image.elf  # noqa: B018 -- parse the ELF header now: a failure is bad input
    except PermissionError as exc:
        raise SFrameError(f"{path}: cannot read: {exc.strerror}", field="file") from exc
    except (ELFError, MapsError) as exc:
        raise SFrameError(f"{path}: not a readable ELF file: {exc}", field="file") from exc
    return table, image


def check_binary(path: str | os.PathLike, *, expect_binutils: tuple[int, int] | None = None) -> BinaryCheck:
    """Check the SFrame section of the ELF file at ``path`` (see the module docstring).

    ``expect_binutils``: the (major, minor) of the binutils that linked it, when known; decides
    whether a V2 section must carry FDE_FUNC_START_PCREL.  Raises :class:`SFrameError` for input
    that cannot be checked at all (see :func:`load`).
    """
    table, image = load(path, strict=False)
    return check_table(table, image, expect_binutils=expect_binutils)


def check_table(table: SFrameTable, image: ElfImage, *,
                expect_binutils: tuple[int, int] | None = None) -> BinaryCheck:
    """The checks over an already parsed (``strict=False``) table and its ELF image."""
    sec = table.section
    h = sec.header
    out = BinaryCheck(table.source, h.version, h.flag_names(), table.via, h.num_fdes, h.num_fres)
    _check_header(sec, out, expect_binutils)
    outside = _check_fdes(sec, table.text_ranges, _function_symbols(image), out)
    if h.abi_arch != F.ABI_AMD64_ENDIAN_LITTLE:
        out.notes.append(f"rules not compared: frame rules are modelled for AMD64 only, not "
                         f"{F.ABI_NAMES[h.abi_arch]}")
        _check_fres_only(sec, out)
        return out
    cfi = cfi_table(image)
    if cfi.error is not None:
        out.notes.append(f"rules not compared: {cfi.error}")
    if not len(cfi):
        out.notes.append("rules not compared: no .eh_frame or .debug_frame FDEs")
        cfi = None
    for fde in sec.fdes:
        fres = _fres(sec, fde, out)
        if fres is None:
            continue
        _check_fre_starts(fde, fres, out)
        if cfi is not None and fde.index not in outside and cfi.error is None:
            _compare_rules(sec, fde, fres, cfi, out)
    return out


# ------------------------------------------------------------------------------------ header


def _check_header(sec: SFrameSection, out: BinaryCheck, expect_binutils) -> None:
    h = sec.header
    if not h.sorted:
        out.findings.append(Finding("header", "SFRAME_F_FDE_SORTED is not set: a linked section's FDEs must be "
                                              "sorted (ld sorts them and sets the flag)"))
    if h.version == F.SFRAME_VERSION_3 and not h.pcrel:
        out.findings.append(Finding("header", "SFRAME_F_FDE_FUNC_START_PCREL is not set: every V3 section has "
                                              "PC-relative function starts"))
    elif h.version == F.SFRAME_VERSION_2 and not h.pcrel:
        if expect_binutils is not None and tuple(expect_binutils) >= PCREL_V2_SINCE:
            out.findings.append(Finding(
                "header", f"SFRAME_F_FDE_FUNC_START_PCREL is not set, but binutils "
                          f"{'.'.join(map(str, expect_binutils))} writes V2 with it (from 2.45 on)"))
        elif expect_binutils is None:
            out.notes.append("V2 without SFRAME_F_FDE_FUNC_START_PCREL: the layout of binutils 2.41-2.44 "
                             "(2.45+ set it; pass the producer's version to require it)")
    if h.abi_arch == F.ABI_AMD64_ENDIAN_LITTLE:
        if h.cfa_fixed_ra_offset != AMD64_FIXED_RA:
            out.findings.append(Finding("header", f"CFA fixed RA offset is {h.cfa_fixed_ra_offset}, AMD64 "
                                                  f"keeps the RA at CFA{AMD64_FIXED_RA}"))
        if h.cfa_fixed_fp_offset != F.CFA_FIXED_OFFSET_INVALID:
            out.findings.append(Finding("header", f"CFA fixed FP offset is {h.cfa_fixed_fp_offset}, AMD64 "
                                                  f"has no fixed FP offset (0)"))


# ------------------------------------------------------------------------------------ FDEs


@dataclass(frozen=True)
class _Sym:
    name: str
    addr: int
    size: int


def _function_symbols(image: ElfImage) -> dict[int, list[_Sym]]:
    syms: dict[int, list[_Sym]] = {}
    elf = image.elf
    for secname in (".symtab", ".dynsym"):
        sec = elf.get_section_by_name(secname)
        if sec is None or not hasattr(sec, "iter_symbols"):
            continue
        for s in sec.iter_symbols():
            if s["st_info"]["type"] not in ("STT_FUNC", "STT_GNU_IFUNC") or s["st_shndx"] == "SHN_UNDEF":
                continue
            if not s["st_value"]:
                continue
            syms.setdefault(s["st_value"], []).append(_Sym(s.name, s["st_value"], s["st_size"]))
    return syms


def _fde_where(fde: SFrameFDE) -> str:
    return f"FDE {fde.index} [{fde.func_start:#x}, {fde.func_end:#x})"


def _check_fdes(sec: SFrameSection, text: list[tuple[int, int]], syms: dict[int, list[_Sym]],
                out: BinaryCheck) -> set[int]:
    """Order, overlap, placement and symbols.  Returns the indexes of FDEs outside the text."""
    fdes = sec.fdes
    for prev, fde in itertools.pairwise(fdes):
        if fde.func_start < prev.func_start:
            out.findings.append(Finding(
                "fde-order", f"{_fde_where(fde)} starts before FDE {prev.index} ({prev.func_start:#x})",
                fde.index, addr=fde.func_start, end=fde.func_end))
    by_start = sorted(fdes, key=lambda f: (f.func_start, f.index))
    reach: SFrameFDE | None = None  # the FDE reaching furthest so far
    for fde in by_start:
        if reach is not None and fde.func_start < reach.func_end:
            out.findings.append(Finding(
                "fde-overlap", f"{_fde_where(fde)} overlaps {_fde_where(reach)} by "
                               f"{min(reach.func_end, fde.func_end) - fde.func_start} bytes",
                fde.index, addr=fde.func_start, end=min(reach.func_end, fde.func_end)))
        if reach is None or fde.func_end > reach.func_end:
            reach = fde
    outside: set[int] = set()
    sym_starts = sorted(syms)
    for fde in fdes:
        if not any(lo <= fde.func_start and fde.func_end <= hi for lo, hi in text):
            outside.add(fde.index)
            segs = ", ".join(f"[{lo:#x}, {hi:#x})" for lo, hi in text) or "none"
            out.findings.append(Finding(
                "fde-outside-text", f"{_fde_where(fde)} is not inside an executable PT_LOAD segment "
                                    f"(those: {segs})", fde.index, addr=fde.func_start, end=fde.func_end))
            continue
        at = syms.get(fde.func_start)
        if at:
            sized = [s for s in at if s.size]
            if sized and not any(s.size == fde.func_size for s in sized):
                names = ", ".join(f"{s.name} ({s.size} bytes)" for s in sized)
                out.findings.append(Finding(
                    "fde-symbol", f"{_fde_where(fde)}: {fde.func_size} bytes, the function symbol at its start "
                                  f"says otherwise: {names}", fde.index, addr=fde.func_start, end=fde.func_end))
            continue
        i = bisect.bisect_right(sym_starts, fde.func_start) - 1
        while i >= 0:
            s = max(syms[sym_starts[i]], key=lambda s: s.size)
            if s.size and s.addr < fde.func_start < s.addr + s.size:
                out.findings.append(Finding(
                    "fde-symbol", f"{_fde_where(fde)} starts inside {s.name} [{s.addr:#x}, {s.addr + s.size:#x}) "
                                  f"at +{fde.func_start - s.addr:#x}, not at a function start",
                    fde.index, addr=fde.func_start, end=fde.func_end))
                break
            if s.size:
                break  # the nearest sized symbol below ends before the FDE: no function covers it
            i -= 1
    return outside


# ------------------------------------------------------------------------------------ FREs


def _fres(sec: SFrameSection, fde: SFrameFDE, out: BinaryCheck) -> list[SFrameFRE] | None:
    try:
        return sec.fres(fde)
    except SFrameError as exc:
        out.findings.append(Finding("fre-decode", f"{_fde_where(fde)}: {exc}", fde.index,
                                    addr=fde.func_start, end=fde.func_end))
        return None


def _check_fres_only(sec: SFrameSection, out: BinaryCheck) -> None:
    for fde in sec.fdes:
        fres = _fres(sec, fde, out)
        if fres is not None:
            _check_fre_starts(fde, fres, out)


def _check_fre_starts(fde: SFrameFDE, fres: list[SFrameFRE], out: BinaryCheck) -> None:
    limit, what = (fde.rep_size, f"its {fde.rep_size}-byte repetition block") if fde.pcmask else \
        (fde.func_size, f"the function's {fde.func_size} bytes")
    prev = None
    for k, fre in enumerate(fres):
        if fre.start >= limit:
            addr = fde.func_start + fre.start
            out.findings.append(Finding(
                "fre-start", f"{_fde_where(fde)}: FRE {k} starts at +{fre.start:#x} ({addr:#x}), past {what}",
                fde.index, k, addr=addr))
        elif prev is not None and fre.start <= prev:
            out.findings.append(Finding(
                "fre-start", f"{_fde_where(fde)}: FRE {k} starts at +{fre.start:#x}, not after FRE {k - 1} "
                             f"(+{prev:#x})", fde.index, k, addr=fde.func_start + fre.start))
        prev = fre.start


# ------------------------------------------------------------------------------------ rules


def _fre_ranges(fde: SFrameFDE, fres: list[SFrameFRE]):
    """(FRE index, FRE, [lo, hi) link-time range) for every FRE that covers addresses, in order.

    PCINC: from the FRE's start to the next FRE's (or the function's end).  PCMASK: every
    repetition block of the function, each address where ``offset % rep_size`` falls in the FRE.
    """
    if not fde.pcmask:
        for k, fre in enumerate(fres):
            lo = fde.func_start + fre.start
            nxt = fres[k + 1].start if k + 1 < len(fres) else fde.func_size
            hi = fde.func_start + min(max(nxt, fre.start), fde.func_size)
            if lo < hi:
                yield k, fre, [(lo, hi)]
        return
    rep = fde.rep_size
    for k, fre in enumerate(fres):
        nxt = fres[k + 1].start if k + 1 < len(fres) else rep
        ranges = []
        for block in range(0, fde.func_size, rep):
            lo = fde.func_start + block + fre.start
            hi = fde.func_start + min(block + min(nxt, rep), fde.func_size)
            if lo < hi:
                ranges.append((lo, hi))
        if ranges:
            yield k, fre, ranges


def _compare_rules(sec: SFrameSection, fde: SFrameFDE, fres: list[SFrameFRE], cfi: CFITable,
                   out: BinaryCheck) -> None:
    compare_signal = fde.has_attr  # V1/V2 cannot mark a signal frame
    for k, fre, ranges in _fre_ranges(fde, fres):
        try:
            ours = sec.rule(fde, fre)
        except SFrameError as exc:
            out.findings.append(Finding("fre-decode", f"{_fde_where(fde)}: FRE {k}: {exc}", fde.index, k))
            continue
        complete = True
        open_: dict[str, int] = {}  # kind -> index of the finding the next address may widen
        for lo, hi in ranges:
            points = list(range(lo, hi)) if fde.pcmask else [lo, *_row_starts(cfi, lo, hi)]
            for i, pc in enumerate(points):
                end = points[i + 1] if i + 1 < len(points) else hi
                try:
                    theirs = cfi.rule_for_link(pc, signal_ok=True)
                except UnsupportedCFI as exc:
                    complete = False
                    out.notes.append(f"{_fde_where(fde)}: FRE {k} at {pc:#x} not compared: {exc}")
                    continue
                out.addresses_compared += 1
                if theirs is None:
                    complete = False
                    _add(out, open_, Finding("no-cfi", f"{_fde_where(fde)}: FRE {k} describes "
                                                       f"[{pc:#x}, {end:#x}), .eh_frame has no row there",
                                             fde.index, k, pc, end, ours, None))
                    continue
                for kind in _differences(ours, theirs, compare_signal):
                    _add(out, open_, Finding(kind, _rule_message(kind, fde, k, pc, end, ours, theirs),
                                             fde.index, k, pc, end, ours, theirs))
        if complete:
            out.fres_checked += 1


def _row_starts(cfi: CFITable, lo: int, hi: int) -> list[int]:
    try:
        return cfi.row_starts(lo, hi)
    except UnsupportedCFI:
        return []


def _differences(ours: FrameRule, theirs: FrameRule, compare_signal: bool) -> list[str]:
    kinds = []
    ours_outermost = ours.ra.base == UNDEFINED and ours.cfa.base == UNDEFINED
    if not ours_outermost and ours.cfa != theirs.cfa:
        kinds.append("cfa")
    if ours.ra != theirs.ra:
        kinds.append("ra")
    if not ours_outermost and ours.fp != theirs.fp:
        kinds.append("fp")
    if compare_signal and ours.signal_frame != theirs.signal_frame:
        kinds.append("signal")
    return kinds


def _rule_message(kind: str, fde: SFrameFDE, k: int, pc: int, end: int, ours: FrameRule,
                  theirs: FrameRule) -> str:
    where = f"{_fde_where(fde)}: FRE {k} at [{pc:#x}, {end:#x})"
    if kind == "signal":
        return (f"{where}: SFrame says {'a' if ours.signal_frame else 'not a'} signal frame, .eh_frame "
                f"{'does' if theirs.signal_frame else 'does not'} (CIE augmentation 'S')")
    return f"{where}: {kind.upper()} sframe {getattr(ours, kind)}, eh_frame {getattr(theirs, kind)}"


def _add(out: BinaryCheck, open_: dict[str, int], f: Finding) -> None:
    """Append ``f``, or widen the FRE's previous finding of its kind when that one ends where
    ``f`` starts and names the same two rules (one finding per FRE and disagreement, not one per
    CFI row).  ``open_``: kind -> index in ``out.findings`` of the FRE's last finding of it."""
    i = open_.get(f.kind)
    prev = out.findings[i] if i is not None else None
    if prev is not None and prev.end == f.addr and prev.sframe == f.sframe and prev.cfi == f.cfi:
        old, new = f"[{f.addr:#x}, {f.end:#x})", f"[{prev.addr:#x}, {f.end:#x})"
        out.findings[i] = replace(f, addr=prev.addr, message=f.message.replace(old, new, 1))
        return
    open_[f.kind] = len(out.findings)
    out.findings.append(f)
