"""A static checker of SFrame sections -- linked binaries, relocatable objects, archives: no
guest, structured results only.

:func:`check_binary` reads one ELF file and returns a :class:`BinaryCheck`: what was checked
(FDEs, FREs compared with the DWARF CFI) and a list of :class:`Finding`, each of one kind
from :data:`KINDS`; :func:`check_file` does the same for an ELF file or each member of an ``ar``
archive.  Rendering lives in :mod:`harness.report.sframe`, the command in
:mod:`harness.commands.sframe`.  It lives in unwind/, above sframe/, because it reads both sides:
the SFrame section (:mod:`harness.sframe`) and the DWARF CFI (:mod:`.cfi`).

A relocatable object is read placed (:func:`harness.sframe.reloc.place_object`: its sections at
addresses of their own, ``.sframe`` and ``.eh_frame`` relocated) and checked by the rules that hold for
objects: no FDE_SORTED, FDE order or segment rule (the linker sorts; objects have no segments),
each function inside an executable section instead of a PT_LOAD.  A linked output is checked by
every rule, and first for what its linker did with the inputs' sections (:data:`LINKER_KINDS`):

* linker -- ``concatenated-not-merged`` (several SFrame sections laid end to end in .sframe,
  each then checked at its own address), ``pcrel-starts-unflagged`` (V1/V2 starts that land on
  functions only when read from their own fields: the inputs' relocated values, left as they
  were; that section is then read so), ``fdes-unsorted`` (no FDE_SORTED), ``no-pt-gnu-sframe``
  (a .sframe section the kernel's lookup cannot see).

The checks, in the order they run:

* header -- ``FDE_FUNC_START_PCREL`` must be
  set in V3 (gas and ld 2.46+ always set it) and in V2 when the producer is binutils 2.45 or
  later (``expect_binutils``; a V2 section does not say which binutils wrote it, so without
  that hint a V2 section without the flag is accepted as 2.41-2.44 output and a note says so);
  AMD64 fixes the RA at CFA-8 and the FP at no fixed place.
* FDE table -- in ascending order of function start (``fde-order``, linked outputs) and no two
  functions overlapping (``fde-overlap``); each function inside an executable PT_LOAD segment
  (an object's: an executable section) (``fde-outside-text``); where a function symbol
  (``.symtab``/``.dynsym``, STT_FUNC or STT_GNU_IFUNC) starts at the FDE's start its size must
  be the FDE's, or another's of the symbols there (``fde-symbol``), and an FDE must not start
  inside a sized function symbol that starts elsewhere (``fde-symbol`` too).
* FREs -- each FRE start inside its function (PCINC: below ``func_size``, but a 0-byte
  function's one FRE at 0, which gas writes; PCMASK: below the repetition block) and after the
  previous one (``fre-start``); FRE data that does not decode (``fre-decode``).
* rules -- each FRE's CFA, RA and FP rules equal the ``.eh_frame`` row for every address the
  FRE covers (``cfa``, ``ra``, ``fp``; ``signal`` for V3's signal-frame bit against the CIE's
  "S" augmentation); an FRE covering an address no CFI row describes is ``no-cfi``.  Both sides
  are :class:`harness.rule.FrameRule` values: SFrame's through :meth:`SFrameSection.rule`, the
  CFI's through :meth:`CFITable.rule_for_link`.  An RA-undefined FRE (the outermost frame) has no
  CFA or FP, so only its RA is compared.  The comparison runs at every FRE start and at every
  CFI row start inside an FRE's range; for a PCMASK FDE (PLT stubs, whose CFA expression depends
  on the PC) at every address of the function.

Input that cannot be read at all -- no such file, not ELF, no SFrame section, a header or FDE
table that does not decode, a relocation this reader does not apply -- raises
:class:`SFrameError` (the CLI's exit code 2); an archive member's is an error of that member.

No verdict on nothing: a check that checked nothing is never clean.  :attr:`BinaryCheck.no_verdict`
says why a check is no verdict on its section, and the CLI exits 2 for it (bad input: what
was given cannot be judged), whatever else it found:

* the section has no FDE (well-formed, but nothing to check -- gas 2.41-2.45 write such a
  section where they skip every function of an object), or no FRE covers an address (an
  object of 0-byte functions) and nothing else was found;
* the rules could not be compared at all: ``.eh_frame`` (or ``.debug_frame``) does not decode,
  there is no CFI to compare with, or the ABI's frame rules are not modelled -- the section is
  still checked structurally and those findings reported, but the comparison, the check's
  main claim, has no input;
* some FREs were not compared because their ``.eh_frame`` FDE does not decode (a partly
  corrupted ``.eh_frame`` is bad input for the comparison as a wholly corrupted one is);
* no FRE was compared and nothing was found (every row one the model cannot read).

Each count a verdict rests on -- FDEs, FREs, FREs checked against ``.eh_frame``, addresses
compared -- is kept beside it and printed with it (:func:`harness.report.sframe.format_summary`).
"""

from __future__ import annotations

import bisect
import io
import itertools
import os
import struct
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.construct.core import ConstructError
from elftools.elf.elffile import ELFFile

from ..rule import UNDEFINED, FrameRule
from ..sframe import format as F
from ..sframe.ar import is_archive, iter_members
from ..sframe.elf import PT_GNU_SFRAME, SFrameTable, segment_type
from ..sframe.errors import SFrameError
from ..sframe.parse import SFrameFDE, SFrameFRE, SFrameSection
from ..sframe.reloc import place_object
from .cfi import CFITable, CorruptCFI, UnsupportedCFI, cfi_table
from .elfsyms import FUNCTION_TYPE_NUMBERS, SHN_UNDEF, symbols
from .maps import ElfImage, MapsError
from .symbolize import Places, places

__all__ = ["KINDS", "LINKER_KINDS", "RULE_KINDS", "BinaryCheck", "FileCheck", "Finding", "check_binary",
           "check_file", "check_table", "load", "load_data"]


# Every kind of finding, with a one-line description (the report prints them in this order).
KINDS = {
    # what the linker did with its inputs' .sframe sections (linked outputs only)
    "concatenated-not-merged": "the inputs' .sframe sections laid end to end, one SFrame header each, not merged "
                               "into one section: a reader sees the first",
    "pcrel-starts-unflagged": "function starts left PC-relative (the inputs' relocated fields) under a header "
                              "without FDE_FUNC_START_PCREL, which says section-relative",
    "fdes-unsorted": "a linked section without FDE_SORTED (its FDEs left in input order)",
    "no-pt-gnu-sframe": "a .sframe section but no PT_GNU_SFRAME program header: the kernel's lookup sees none",
    # the section itself
    "header": "header field or flag wrong",
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
LINKER_KINDS = ("concatenated-not-merged", "pcrel-starts-unflagged", "fdes-unsorted", "no-pt-gnu-sframe")

# What pyelftools raises on ELF structures that do not decode (a truncated or corrupted file):
# besides ELFError, construct's and struct's errors and, for absurd offsets and sizes, OverflowError.
ELF_DECODE_ERRORS = (ELFError, MapsError, ConstructError, struct.error, OverflowError, EOFError)


# The binutils release from which V2 sections carry FDE_FUNC_START_PCREL (errata 1).
PCREL_V2_SINCE = (2, 45)
AMD64_FIXED_RA = -8


@dataclass(frozen=True)
class Finding:
    """One violation or disagreement.  ``addr``/``end``: the address range at fault (link-time);
    ``sframe``/``cfi``: the two rules of a rule disagreement, else None; ``section``/``symbol``:
    where ``addr`` lies (:class:`harness.unwind.symbolize.Places`), which the message names too."""

    kind: str
    message: str
    fde: int | None = None  # index in the section's FDE table
    fre: int | None = None  # index in the FDE's FREs
    addr: int | None = None
    end: int | None = None
    sframe: FrameRule | None = None
    cfi: FrameRule | None = None
    section: str | None = None  # the section holding addr (None: no section holds it, or no addr)
    symbol: str | None = None  # the symbol at addr, "name" or "name+0xoff", as objdump -d names it

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
    linked: bool = True  # False: a relocatable object, checked by the rules that hold for objects
    pieces: int = 1  # SFrame sections found laid end to end in the one .sframe
    cfi_without_sframe: int = 0  # .eh_frame FDEs no SFrame FDE covers (a note, not a finding)
    rules_not_compared: str | None = None  # why no FRE's rules could be compared (no usable CFI, another ABI)
    fres_covering: int = 0  # FREs that cover an address, in FDEs inside the text (a 0-byte function's covers none)
    fres_cfi_undecodable: int = 0  # FREs not compared: the .eh_frame FDE covering them does not decode

    @property
    def no_verdict(self) -> str | None:
        """Why this check is no verdict on the section (the CLI's exit 2), or None.  See the
        module docstring: a section with no FDE has nothing to check; a comparison without
        usable CFI, or with some FREs' CFI undecodable, rests on bad input; a check that compared
        no FRE and found nothing has checked nothing."""
        if self.num_fdes == 0:
            return "nothing to check: the section has no FDE"
        if self.fres_covering == 0 and not self.findings:  # 0-byte functions only, or FDEs without FREs
            return "nothing to check: no FRE covers an address"
        if self.rules_not_compared is not None:
            return f"no verdict: rules not compared: {self.rules_not_compared}"
        if self.fres_cfi_undecodable:
            return (f"no verdict: {self.fres_cfi_undecodable} FREs not compared, their .eh_frame FDE does not "
                    f"decode")
        if self.fres_checked == 0 and not self.findings:
            return "no verdict: no FRE compared with .eh_frame (see the notes)"
        return None

    @property
    def clean(self) -> bool:
        """No finding, and something checked: never a verdict on nothing."""
        return not self.findings and self.no_verdict is None

    def by_kind(self) -> Counter:
        return Counter(f.kind for f in self.findings)

    def of_kind(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]


@dataclass
class FileCheck:
    """One file: an ELF file (one check) or an archive (one per member with .sframe)."""

    path: str
    archive: bool
    checks: list[BinaryCheck] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # members that could not be checked, one line each
    members: int = 0  # archive members (0 for an ELF file)
    without_sframe: list[str] = field(default_factory=list)  # archive members with no .sframe

    @property
    def no_verdict(self) -> list[str]:
        """Why this file's verdict would rest on nothing, one line each: each check's
        :attr:`BinaryCheck.no_verdict` (an archive's named by its member), and an archive none
        of whose members has a .sframe section (an ELF file without one is an SFrameError)."""
        out = [f"{c.path}: {c.no_verdict}" if self.archive else c.no_verdict for c in self.checks if c.no_verdict]
        if self.archive and not self.checks and not self.errors:
            out.append("nothing to check: no member has a .sframe section")
        return out

    @property
    def clean(self) -> bool:
        return not self.errors and not self.no_verdict and all(c.clean for c in self.checks)


def load(path: str | os.PathLike, *, strict: bool = False, place: bool = True) -> tuple[SFrameTable, ElfImage]:
    """The SFrame table and ELF image of the file at ``path`` (``place``: see :func:`load_data`).

    Raises :class:`SFrameError` naming what is wrong with the input: no such file, not a
    regular file, unreadable, not ELF, no SFrame section, a header or FDE table that does not
    decode.  Other OS errors (an I/O error, ...) propagate: they are not the input's fault.
    """
    path = Path(path)
    return load_data(_read(path), str(path), strict=strict, place=place)


def _read(path: Path) -> bytes:
    if not path.exists():
        raise SFrameError(f"{path}: no such file", field="file")
    if not path.is_file():
        raise SFrameError(f"{path}: not a regular file", field="file")
    try:
        return path.read_bytes()
    except PermissionError as exc:
        raise SFrameError(f"{path}: cannot read: {exc.strerror}", field="file") from exc


def load_data(data: bytes, source: str, *, strict: bool = False,
              place: bool = True) -> tuple[SFrameTable, ElfImage]:
    """:func:`load` of an ELF file's bytes.  With ``place``, a relocatable object is placed
    (:func:`.reloc.place_object`): its sections at addresses of their own, its ``.sframe`` and
    ``.eh_frame`` relocated, so that both name the functions' addresses -- what the checker
    reads.  Without, the section is read as its version's objdump shows it
    (:meth:`SFrameTable.from_elf`) -- what ``dump`` prints."""
    try:
        image = ElfImage(source, data)
        elf = image.elf
        if elf["e_type"] == "ET_REL" and place:
            placed = place_object(data, source)
            image = ElfImage(source, placed.data)
            image.elf  # noqa: B018
            table = SFrameTable.from_placed(placed, source, strict=strict)
        else:
            table = SFrameTable.from_elf_data(data, source, strict=strict)
    except ELF_DECODE_ERRORS as exc:
        raise SFrameError(f"{source}: not a readable ELF file: {type(exc).__name__}: {exc}", field="file") from exc
    return table, image


def check_binary(path: str | os.PathLike, *, expect_binutils: tuple[int, int] | None = None) -> BinaryCheck:
    """Check the SFrame section of the ELF file at ``path`` (see the module docstring).

    ``expect_binutils``: the (major, minor) of the binutils that linked it, when known; decides
    whether a V2 section must carry FDE_FUNC_START_PCREL.  Raises :class:`SFrameError` for input
    that cannot be checked at all (see :func:`load`).
    """
    table, image = load(path, strict=False)  # pragma: no mutate (equivalent: None is as false; False is the default)
    return _check_decoded(table, image, expect_binutils)


def _check_decoded(table: SFrameTable, image: ElfImage, expect_binutils) -> BinaryCheck:
    """:func:`check_table`, where ELF structures that do not decode (the symbol table, the
    program headers of a corrupted file) are bad input, not a checker failure."""
    try:
        return check_table(table, image, expect_binutils=expect_binutils)
    except ELF_DECODE_ERRORS as exc:
        raise SFrameError(f"{table.source}: ELF structures do not decode: {type(exc).__name__}: {exc}",
                          field="file") from exc


def check_file(path: str | os.PathLike, *, expect_binutils: tuple[int, int] | None = None,
               data: bytes | None = None) -> FileCheck:
    """:func:`check_binary` of an ELF file, or of each member of an ``ar`` archive that has an
    SFrame section (members without one are listed, members that cannot be read are errors of
    the archive's, one line each).  Raises :class:`SFrameError` for an ELF file that cannot be
    checked, or an archive that cannot be read at all."""
    path = Path(path)
    if data is None:
        data = _read(path)
    if not is_archive(data):
        table, image = load_data(data, str(path))
        return FileCheck(str(path), False, [_check_decoded(table, image, expect_binutils)])
    out = FileCheck(str(path), True)
    for m in iter_members(path, data):
        out.members += 1
        source = f"{path}({m.name})"
        if m.data[:4] != b"\x7fELF":
            out.without_sframe.append(m.name)  # a non-ELF member (an LTO bitcode file, text)
            continue
        try:
            # a section named .sframe has its name in the member's bytes (.shstrtab): without
            # them there is none, and pyelftools (milliseconds a member) need not look
            if b".sframe" not in m.data or not _has_sframe_section(m.data):
                out.without_sframe.append(m.name)
                continue
            table, image = load_data(m.data, source)
            out.checks.append(_check_decoded(table, image, expect_binutils))
        except SFrameError as exc:
            out.errors.append(str(exc) if source in str(exc) else f"{source}: {exc}")
    return out


def load_members(path: str | os.PathLike) -> list[tuple[str, SFrameTable | None]]:
    """What ``dump`` shows of an archive: each ELF member's name and SFrame table as objdump
    reads it (unplaced), None for a member without a .sframe section.  Raises
    :class:`SFrameError` for an archive that cannot be read or a member that does not decode."""
    path = Path(path)
    out: list[tuple[str, SFrameTable | None]] = []
    for m in iter_members(path, _read(path)):
        if m.data[:4] != b"\x7fELF":
            continue
        if b".sframe" not in m.data or not _has_sframe_section(m.data):
            out.append((m.name, None))
            continue
        out.append((m.name, SFrameTable.from_elf_data(m.data, f"{path}({m.name})", strict=False)))  # pragma: no mutate (equivalent: None is as false)  # noqa: E501
    return out


def is_archive_file(path: str | os.PathLike) -> bool:
    try:
        with open(path, "rb") as f:
            return is_archive(f.read(8))  # pragma: no mutate (equivalent: is_archive reads the first 8 bytes)
    except OSError:
        return False  # load() says what is wrong with it  # pragma: no mutate (equivalent: True: load_members' _read raises as load's)  # noqa: E501


def _has_sframe_section(data: bytes) -> bool:
    try:
        elf = ELFFile(io.BytesIO(data))
        return elf.num_sections() > 0 and elf.get_section_by_name(".sframe") is not None  # pragma: no mutate (equivalent: >= 0, no section is no .sframe)  # noqa: E501
    except ELF_DECODE_ERRORS as exc:
        raise SFrameError(f"not a readable ELF file: {type(exc).__name__}: {exc}", field="file") from exc


def check_table(table: SFrameTable, image: ElfImage, *,
                expect_binutils: tuple[int, int] | None = None) -> BinaryCheck:
    """The checks over an already parsed (``strict=False``) table and its ELF image.

    A linked output (ET_EXEC, ET_DYN) is checked by every rule, and what its linker did with
    the inputs' sections is named first (:data:`LINKER_KINDS`): several SFrame sections laid end
    to end are each checked at their own address, with their function starts read the way the
    FDEs bear out.  A relocatable object (placed by :func:`load_data`) is checked by the rules
    that hold for objects: its FDEs need not be sorted, and there are no segments."""
    sec = table.section
    h = sec.header
    linked = image.elf["e_type"] != "ET_REL"
    out = BinaryCheck(table.source, h.version, h.flag_names(), table.via, h.num_fdes, h.num_fres, linked=linked)
    syms = _function_symbols(image)
    cfi = None
    # Without usable CFI the section is still checked structurally, but the comparison -- the
    # check's main claim -- has nothing to rest on: rules_not_compared makes the check no
    # verdict (exit 2: bad input for the comparison), never a clean one.
    if h.abi_arch == F.ABI_AMD64_ENDIAN_LITTLE:
        cfi = cfi_table(image)
        if cfi.error is not None:
            out.rules_not_compared = cfi.error
        elif not len(cfi) and not image.elf.num_sections():
            # read through PT_GNU_SFRAME: the CFI reader finds .eh_frame by its section header
            out.rules_not_compared = "no section headers, by which .eh_frame is found"
        elif not len(cfi):
            out.rules_not_compared = "no .eh_frame or .debug_frame FDEs"
        if out.rules_not_compared is not None:
            cfi = None
    else:
        out.rules_not_compared = f"frame rules are modelled for AMD64 only, not {F.ABI_NAMES[h.abi_arch]}"
    if out.rules_not_compared is not None:
        out.notes.append(f"rules not compared: {out.rules_not_compared}")
    where = places(image)
    pieces = [("", sec)]
    if linked:
        pieces = _linker_findings(table, image, syms, cfi, out)
    for prefix, piece in pieces:
        _check_section(piece, prefix, table, syms, cfi, expect_binutils, out, where)
    if cfi is not None:
        _uncovered(cfi, [p for _, p in pieces], syms, out)
    # every finding with an address names where it lies: the section and the symbol
    out.findings = [replace(f, section=where.section(f.addr), symbol=where.symbol(f.addr)) if f.addr is not None
                    else f for f in out.findings]
    return out


def _uncovered(cfi: CFITable, sections: list[SFrameSection], syms: dict[int, list[_Sym]], out: BinaryCheck) -> None:
    """Note the functions .eh_frame describes and no SFrame FDE does (gas skipped them, their
    object had no .sframe, or the linker dropped its input): a fact, not a fault of the section."""
    covered = sorted((f.func_start, f.func_end) for sec in sections for f in sec.fdes)
    starts = [lo for lo, _ in covered]
    reach = list(itertools.accumulate((hi for _, hi in covered), max))  # furthest end so far
    missing = []
    for fde in cfi.fdes():
        pc = fde["initial_location"]
        i = bisect.bisect_right(starts, pc) - 1
        if i < 0 or reach[i] <= pc:
            missing.append(pc)
    out.cfi_without_sframe = len(missing)
    if missing:
        names = [max(syms[pc], key=lambda s: s.size).name if pc in syms else f"{pc:#x}" for pc in missing[:5]]
        more = f", ... {len(missing) - 5} more" if len(missing) > 5 else ""
        out.notes.append(f"{len(missing)} of {len(cfi.fdes())} .eh_frame FDEs have no SFrame FDE: "
                         f"{', '.join(names)}{more}")


def _check_section(sec: SFrameSection, prefix: str, table: SFrameTable, syms, cfi, expect_binutils,
                   out: BinaryCheck, where: Places) -> None:
    n = len(out.findings)
    _check_header(sec, out, expect_binutils, out.linked)
    outside = _check_fdes(sec, table.text_ranges, syms, out, out.linked, where)
    for fde in sec.fdes:
        fres = _fres(sec, fde, out, where)
        if fres is None:
            continue
        _check_fre_starts(fde, fres, out, where)
        if fde.index not in outside:
            out.fres_covering += sum(1 for _ in _fre_ranges(fde, fres))
            if cfi is not None:
                _compare_rules(sec, fde, fres, cfi, out, where)
    if prefix:
        out.findings[n:] = [replace(f, message=prefix + f.message) for f in out.findings[n:]]


# ------------------------------------------------------------------------------------ linkers


def _linker_findings(table: SFrameTable, image: ElfImage, syms, cfi, out: BinaryCheck) -> list:
    """What the linker did with its inputs' .sframe sections; returns the SFrame sections to
    check as (message prefix, section), each with its function starts read as its FDEs bear out.

    * ld.bfd merges the inputs into one section, sorts it, rewrites V1/V2 starts relative to
      the section, and adds PT_GNU_SFRAME;
    * a linker that does not know SFrame (gold, mold, lld at the versions Debian 12 ships)
      treats .sframe as any allocated section: the inputs' sections laid end to end, each with
      its own header, its relocations applied -- leaving each start as S + A - P, its function's
      distance from the field, which V1/V2 headers without FDE_FUNC_START_PCREL say is from the
      section -- and no program header for it."""
    sec = table.section
    elf = image.elf
    vaddr = sec.section_vaddr
    pieces = [(0, sec)]  # pragma: no mutate (equivalent: one piece has no prefix, where alone its offset is read)
    if table.via != "PT_GNU_SFRAME":
        has_segment = any(segment_type(s) == PT_GNU_SFRAME for s in elf.iter_segments())
        if not has_segment:
            out.findings.append(Finding("no-pt-gnu-sframe", f"a .sframe section at {vaddr:#x} "
                                        f"({len(sec.data)} bytes) but no PT_GNU_SFRAME program header: the "
                                        f"kernel finds a module's SFrame data through that segment only, so its "
                                        f"lookup sees none", addr=vaddr, end=vaddr + len(sec.data)))
        pieces = _pieces(sec, out)
        if len(pieces) > 1:
            counts = ", ".join(f"{p.header.num_fdes}" for _, p in pieces)
            out.findings.append(Finding(
                "concatenated-not-merged",
                f"{len(pieces)} SFrame sections laid end to end in .sframe (at +"
                f"{', +'.join(f'{off:#x}' for off, _ in pieces)}; {counts} FDEs), not merged into one: the header "
                f"at the start accounts for its own {pieces[0][1].header.num_fdes} FDEs, and a reader sees no "
                f"others", addr=vaddr, end=vaddr + len(sec.data)))
            out.pieces = len(pieces)
            out.num_fdes = sum(p.header.num_fdes for _, p in pieces)
            out.num_fres = sum(p.header.num_fres for _, p in pieces)
    result = []
    for k, (off, piece) in enumerate(pieces):
        prefix = f"section {k + 1}/{len(pieces)} at +{off:#x}: " if len(pieces) > 1 else ""
        h = piece.header
        if not h.pcrel and h.version < F.SFRAME_VERSION_3 and piece.fdes:
            as_pcrel = SFrameSection.parse(piece.data, piece.section_vaddr, pcrel=True,
                                           strict=False)  # pragma: no mutate (equivalent: strict=None is as false)
            hits_sec, hits_pc = _start_hits(piece, syms, cfi), _start_hits(as_pcrel, syms, cfi)
            if hits_pc > hits_sec:
                off0 = piece.fdes[0].offset
                out.findings.append(Finding(
                    "pcrel-starts-unflagged",
                    f"{prefix}the function starts are PC-relative -- read from their own fields, "
                    f"{hits_pc} of {len(piece.fdes)} FDEs start at a function, read from the section as the "
                    f"header says (no SFRAME_F_FDE_FUNC_START_PCREL), {hits_sec} do: FDE 0's field at "
                    f"{piece.section_vaddr + off0:#x} in .sframe holds "
                    f"{as_pcrel.fdes[0].func_start - piece.section_vaddr - off0:#x}"
                    f", the input's relocated value, not rewritten", addr=piece.section_vaddr,
                    end=piece.section_vaddr + h.end))
                piece = as_pcrel
        if not h.sorted:
            out.findings.append(Finding("fdes-unsorted", f"{prefix}SFRAME_F_FDE_SORTED is not set: a linked "
                                        f"section's FDEs must be sorted (ld sorts them and sets the flag)"))
        result.append((prefix, piece))
    return result


def _pieces(sec: SFrameSection, out: BinaryCheck) -> list[tuple[int, SFrameSection]]:
    """The SFrame sections laid end to end in ``sec``'s bytes: after each one's data, the next
    header at the next 8-byte boundary (gas aligns .sframe to 8), until the bytes run out."""
    pieces = [(0, sec)]
    data = sec.data
    pos = sec.header.end
    while pos < len(data):  # pragma: no mutate (equivalent: `<=` too, at pos == len no header fits: break)
        nxt = (pos + 7) // 8 * 8
        if data[pos:nxt].strip(b"\0") or nxt + F.HEADER_SIZE > len(data):
            break
        try:
            piece = SFrameSection.parse(data[nxt:], sec.section_vaddr + nxt,
                                        strict=False)  # pragma: no mutate (equivalent: strict=None is as false)
        except SFrameError as exc:
            out.notes.append(f"{len(data) - nxt} bytes after the SFrame data at +{nxt:#x} do not decode as "
                             f"another section: {exc}")
            return pieces
        pieces.append((nxt, piece))
        pos = nxt + piece.header.end
    if data[pos:].strip(b"\0"):  # empty from len(data) on
        out.notes.append(f"{len(data) - pos} bytes after the SFrame data at +{pos:#x}, not another section")
    return pieces


def _start_hits(sec: SFrameSection, syms: dict, cfi) -> int:
    """FDEs whose function start is a function symbol's or an .eh_frame FDE's."""
    n = 0
    for fde in sec.fdes:
        if fde.func_start in syms:
            n += 1
        elif cfi is not None:
            e = cfi.fde_for(fde.func_start)
            n += e is not None and e["initial_location"] == fde.func_start
    return n


# ------------------------------------------------------------------------------------ header


def _check_header(sec: SFrameSection, out: BinaryCheck, expect_binutils, linked: bool) -> None:
    h = sec.header
    if h.version == F.SFRAME_VERSION_3 and not h.pcrel:
        out.findings.append(Finding("header", "SFRAME_F_FDE_FUNC_START_PCREL is not set: every V3 section has "
                                              "PC-relative function starts"))
    elif h.version == F.SFRAME_VERSION_2 and not h.pcrel:
        if expect_binutils is not None and tuple(expect_binutils) >= PCREL_V2_SINCE:
            out.findings.append(Finding(
                "header", f"SFRAME_F_FDE_FUNC_START_PCREL is not set, but binutils "
                          f"{'.'.join(map(str, expect_binutils))} writes V2 with it (from 2.45 on)"))
        elif expect_binutils is None and linked:
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
    for secname in (".symtab", ".dynsym"):
        for s in symbols(image, secname) or ():
            if s.type not in FUNCTION_TYPE_NUMBERS or s.shndx == SHN_UNDEF:
                continue
            if not s.value:
                continue
            syms.setdefault(s.value, []).append(_Sym(s.name, s.value, s.size))
    return syms


def _fde_where(fde: SFrameFDE, where: Places | None = None) -> str:
    """``FDE 2 [0x1040, 0x1048)``, and with ``where`` the section and symbol of its start:
    ``in .plt.got (__cxa_finalize@plt)`` (a finding's; a note names the FDE alone)."""
    at = f"FDE {fde.index} [{fde.func_start:#x}, {fde.func_end:#x})"
    return at if where is None else f"{at} {where.describe(fde.func_start)}"


def _at(where: Places, pc: int) -> str:
    """The symbol ``pc`` lies in, for an FRE's range: ``(main+0x4)``, ``(no symbol)``."""
    return f"({where.symbol(pc) or 'no symbol'})"


def _check_fdes(sec: SFrameSection, text: list[tuple[int, int]], syms: dict[int, list[_Sym]],
                out: BinaryCheck, linked: bool, where: Places) -> set[int]:
    """Order (linked outputs), overlap, placement and symbols.  Returns the indexes of FDEs
    outside the text (executable PT_LOADs; an object's executable sections, as placed)."""
    fdes = sec.fdes
    for prev, fde in itertools.pairwise(fdes):
        if linked and fde.func_start < prev.func_start:
            out.findings.append(Finding(
                "fde-order", f"{_fde_where(fde, where)} starts before FDE {prev.index} ({prev.func_start:#x})",
                fde.index, addr=fde.func_start, end=fde.func_end))
    by_start = sorted(fdes, key=lambda f: (f.func_start, f.index))
    reach: SFrameFDE | None = None  # the FDE reaching furthest so far
    for fde in by_start:
        if reach is not None and fde.func_start < reach.func_end:
            out.findings.append(Finding(
                "fde-overlap", f"{_fde_where(fde, where)} overlaps {_fde_where(reach, where)} by "
                               f"{min(reach.func_end, fde.func_end) - fde.func_start} bytes",
                fde.index, addr=fde.func_start, end=min(reach.func_end, fde.func_end)))
        if reach is None or fde.func_end > reach.func_end:
            reach = fde
    outside: set[int] = set()
    sym_starts = sorted(syms)
    placed = bool(text) or linked
    if not placed:
        out.notes.append("an object without an executable section: where the functions lie is not checked")
    for fde in fdes:
        if placed and not any(lo <= fde.func_start and fde.func_end <= hi for lo, hi in text):
            outside.add(fde.index)
            segs = ", ".join(f"[{lo:#x}, {hi:#x})" for lo, hi in text) or "none"
            what = "an executable PT_LOAD segment" if linked else "an executable section (as placed)"
            out.findings.append(Finding(
                "fde-outside-text", f"{_fde_where(fde, where)} is not inside {what} (those: {segs})", fde.index,
                addr=fde.func_start, end=fde.func_end))
            continue
        at = syms.get(fde.func_start)
        if at:
            sized = [s for s in at if s.size]
            # two symbols may share an address (a function of 0 bytes, then the next one)
            if sized and not any(s.size == fde.func_size for s in at):
                names = ", ".join(f"{s.name} ({s.size} bytes)" for s in sized)
                out.findings.append(Finding(
                    "fde-symbol", f"{_fde_where(fde, where)}: {fde.func_size} bytes, the function symbol at its start "
                                  f"says otherwise: {names}", fde.index, addr=fde.func_start, end=fde.func_end))
            continue
        i = bisect.bisect_right(sym_starts, fde.func_start) - 1
        while i >= 0:
            s = max(syms[sym_starts[i]], key=lambda s: s.size)
            # s.addr < fde.func_start: at or below it (bisect), and no symbol is at it (above)
            if fde.func_start < s.addr + s.size:
                out.findings.append(Finding(
                    "fde-symbol", f"{_fde_where(fde, where)} starts inside {s.name} [{s.addr:#x}, "
                                  f"{s.addr + s.size:#x}) at +{fde.func_start - s.addr:#x}, not at a function start",
                    fde.index, addr=fde.func_start, end=fde.func_end))
                break
            if s.size:
                break  # the nearest sized symbol below ends before the FDE: no function covers it
            i -= 1
    return outside


# ------------------------------------------------------------------------------------ FREs


def _fres(sec: SFrameSection, fde: SFrameFDE, out: BinaryCheck, where: Places) -> list[SFrameFRE] | None:
    try:
        return sec.fres(fde)
    except SFrameError as exc:
        out.findings.append(Finding("fre-decode", f"{_fde_where(fde, where)}: {exc}", fde.index,
                                    addr=fde.func_start, end=fde.func_end))
        return None


def _check_fre_starts(fde: SFrameFDE, fres: list[SFrameFRE], out: BinaryCheck, where: Places) -> None:
    limit, what = (fde.rep_size, f"its {fde.rep_size}-byte repetition block") if fde.pcmask else \
        (fde.func_size, f"the function's {fde.func_size} bytes")
    prev = None
    for k, fre in enumerate(fres):
        if fre.start >= limit and not (limit == 0 and fre.start == 0):  # gas gives a 0-byte function one FRE at 0
            addr = fde.func_start + fre.start
            out.findings.append(Finding(
                "fre-start", f"{_fde_where(fde, where)}: FRE {k} starts at +{fre.start:#x} ({addr:#x}), past {what}",
                fde.index, k, addr=addr))
        elif prev is not None and fre.start <= prev:
            out.findings.append(Finding(
                "fre-start", f"{_fde_where(fde, where)}: FRE {k} starts at +{fre.start:#x}, not after FRE {k - 1} "
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
                   out: BinaryCheck, where: Places) -> None:
    compare_signal = fde.has_attr  # V1/V2 cannot mark a signal frame
    for k, fre, ranges in _fre_ranges(fde, fres):
        # decoded with the FREs: sec.fres() raised (an FDE's fre-decode) for any rule that does not
        ours = sec.rule(fde, fre)
        complete = True
        corrupt = False  # some address's CFI does not decode: bad input for the comparison
        open_: dict[str, int] = {}  # kind -> index of the finding the next address may widen
        for lo, hi in ranges:
            if fde.pcmask:
                points = list(range(lo, hi))
            else:
                try:
                    points = [lo, *cfi.row_starts(lo, hi)]
                except UnsupportedCFI as exc:  # an FDE in [lo, hi) whose rows do not decode
                    complete = False  # pragma: no mutate (equivalent: None, read by `if complete` only)
                    corrupt = corrupt or isinstance(exc, CorruptCFI)
                    out.notes.append(f"{_fde_where(fde)}: FRE {k} at [{lo:#x}, {hi:#x}): rows not read: {exc}")
                    points = [lo]
            for i, pc in enumerate(points):
                end = points[i + 1] if i + 1 < len(points) else hi
                try:
                    theirs = cfi.rule_for_link(pc, signal_ok=True)
                except UnsupportedCFI as exc:
                    complete = False  # pragma: no mutate (equivalent: None, read by `if complete` only)
                    corrupt = corrupt or isinstance(exc, CorruptCFI)
                    out.notes.append(f"{_fde_where(fde)}: FRE {k} at {pc:#x} not compared: {exc}")
                    continue
                out.addresses_compared += 1
                if theirs is None:
                    complete = False  # pragma: no mutate (equivalent: None, read by `if complete` only)
                    _add(out, open_, Finding("no-cfi", f"{_fde_where(fde, where)}: FRE {k} describes "
                                                       f"[{pc:#x}, {end:#x}) {_at(where, pc)}, .eh_frame has no "
                                                       f"row there",
                                             fde.index, k, pc, end, ours))  # no CFI rule: cfi None
                    continue
                for kind in _differences(ours, theirs, compare_signal):
                    _add(out, open_, Finding(kind, _rule_message(kind, fde, k, pc, end, ours, theirs, where),
                                             fde.index, k, pc, end, ours, theirs))
        if complete:
            out.fres_checked += 1
        out.fres_cfi_undecodable += corrupt


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
                  theirs: FrameRule, places_: Places) -> str:
    where = f"{_fde_where(fde, places_)}: FRE {k} at [{pc:#x}, {end:#x}) {_at(places_, pc)}"
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
        # prev's message (its range's start and symbol) with the range's end moved to f's: the
        # FRE's range is the last in the message ("FDE i [lo, hi) ...: FRE k at [a, b) ...")
        head, old, tail = prev.message.rpartition(f"[{prev.addr:#x}, {prev.end:#x})")
        out.findings[i] = replace(prev, end=f.end, message=f"{head}[{prev.addr:#x}, {f.end:#x}){tail}")
        return
    open_[f.kind] = len(out.findings)
    out.findings.append(f)
