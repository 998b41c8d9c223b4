"""Text for ``harness sframe``: the checker's report, and a decoded section in the layout of
``objdump --sframe``.

:func:`format_check` renders a :class:`harness.unwind.sframe_check.BinaryCheck`; :func:`objdump_sframe`
renders an :class:`harness.sframe.SFrameTable` as the objdump of the binutils that writes its
version prints it (libsframe ``sframe-dump.c``; checked line for line against binutils 2.40 for
V1, 2.44 for V2 and 2.47 for V3, tests/unit/report/test_sframe_dump.py):

* 2.40 (V1) prints neither fixed offset, and "u" in the RA column even where the header fixes
  the RA; 2.41+ print "CFA fixed RA offset" (and "CFA fixed FP offset" where one is set) and "f".
* Flags: 2.40 and 2.44 print one name on one line -- with both FDE_SORTED and FRAME_POINTER set,
  only SFRAME_F_FRAME_POINTER (their flag string is overwritten, not appended) -- and "NONE" for
  none; 2.46+ print every name, joined by ",\\n" and aligned under the first.  A V2 section with
  FDE_FUNC_START_PCREL can only come from 2.45, whose objdump is not among the toolchains here:
  it is rendered in the 2.46+ way, unverified.
* V3 appends ``, attr = "S"`` (signal frame) and/or ``"F"`` (flexible FDE) to the function line;
  flexible FREs print ``reg+off``, ``(reg+off)`` for a register-based dereference, ``c+off`` for
  a CFA-based value, dereferenced or not (:func:`_loc`), ``U`` for a padding RA word.
"""

from __future__ import annotations

from collections import Counter

from ..sframe import format as F
from ..sframe.elf import SFrameTable
from ..sframe.parse import Location, SFrameFDE, SFrameFRE, SFrameSection
from ..unwind.sframe_check import KINDS, BinaryCheck, FileCheck

__all__ = ["format_check", "format_file_check", "format_tree", "format_summary", "fre_columns", "objdump_sframe",
           "objdump_sframe_archive"]


# ------------------------------------------------------------------------------------ check


def format_file_check(fc: FileCheck, *, limit: int | None = None) -> str:
    """An ELF file's check, or an archive's: each member's, then a line for the archive with the
    counts its verdict rests on (members, FDEs, FREs, FREs checked, addresses)."""
    parts = [format_check(r, limit=limit) for r in fc.checks]
    if fc.archive:
        parts += [f"{fc.path}: error: {e}" for e in fc.errors]
        checks = fc.checks
        with_findings = sum(bool(r.findings) for r in checks)
        no_verdict = sum(r.no_verdict is not None for r in checks)
        if not checks and not fc.errors:
            verdict = "nothing to check: no member has a .sframe section"
        elif fc.errors or no_verdict:
            verdict = "no verdict"
        else:
            verdict = "findings" if with_findings else "clean"
        parts.append(f"{fc.path}: archive of {fc.members} members: {len(checks)} with .sframe checked "
                     f"({with_findings} with findings, {no_verdict} with no verdict), {len(fc.without_sframe)} "
                     f"without, {len(fc.errors)} unreadable; {_counts(checks)}: {verdict}")
    return "\n".join(parts)


def _counts(checks) -> str:
    """The counts a verdict rests on, summed over ``checks``."""
    return (f"{sum(r.num_fdes for r in checks)} FDEs, {sum(r.num_fres for r in checks)} FREs, "
            f"{sum(r.fres_checked for r in checks)} FREs checked against .eh_frame "
            f"({sum(r.addresses_compared for r in checks)} addresses)")


def format_tree(rep, *, limit: int | None = 20) -> str:
    """A :class:`harness.unwind.sframe_tree.TreeReport`: the figures, one line per finding kind, the
    files that could not be checked, and each package whose files carry SFrame data."""

    withs = rep.with_sframe
    versions = Counter(v for r in withs for v in r.versions)
    vtext = f" ({', '.join(f'V{v}: {n}' for v, n in sorted(versions.items()))} sections)" if versions else ""
    out = [f"{rep.root}: {rep.files} files, {rep.elf_files} ELF files, {rep.archives} archives; "
           f"{len(withs)} with SFrame data{vtext}, "
           f"{sum(r.fdes for r in withs)} FDEs, {sum(r.fres for r in withs)} FREs, "
           f"{sum(r.fres_checked for r in withs)} FREs checked against .eh_frame "
           f"({sum(r.addresses for r in withs)} addresses), "
           f"{sum(r.cfi_without_sframe for r in withs)} .eh_frame FDEs without one; "
           f"{rep.wall:.1f} s on {rep.jobs} processes"]
    findings, files = rep.by_kind()
    for kind in KINDS:
        if findings.get(kind):
            out.append(f"  {kind}: {findings[kind]} findings in {files[kind]} files -- {KINDS[kind]}")
    if not withs:
        out.append("  nothing to check: no file carries SFrame data")  # no verdict on nothing (exit 2)
    elif not findings:
        out.append("  no findings")
    no_verdict = rep.no_verdict
    if no_verdict:
        out.append(f"  no verdict: {len(no_verdict)} files (a check that checked nothing: never counted clean)")
        out += [f"    {line}" for r in no_verdict[:limit] for line in r.no_verdict[:1]]
    errors = [r for r in rep.results if r.errors]
    crashes = [r for r in rep.results if r.crash]
    if errors:
        out.append(f"  unreadable: {len(errors)} files (bad input, each its own)")
        out += [f"    {e}" for r in errors[:limit] for e in r.errors[:1]]
    if crashes:
        out.append(f"  checker errors: {len(crashes)} files (not the input's fault)")
        out += [f"    {r.path}: {r.crash}" for r in crashes[:limit]]
    if rep.timed_out:
        out.append(f"  timed out: {rep.timed_out} files not checked within the bound")
    pkgs = rep.by_package()
    out.append(f"  packages with SFrame data: {len(pkgs)}")
    for name in sorted(pkgs):
        p = pkgs[name]
        said = [f"{p['kinds'][k]} {k}" for k in KINDS if p["kinds"].get(k)]
        said += [f"{p['no_verdict']} no verdict"] if p["no_verdict"] else []
        said += [f"{p['errors']} unreadable"] if p["errors"] else []
        said += [f"{p['crashes']} checker errors"] if p["crashes"] else []
        kinds = ", ".join(said) or "clean"
        shown = ", ".join(p["files"][:3]) + (f", ... {len(p['files']) - 3} more" if len(p["files"]) > 3 else "")
        out.append(f"    {name}: {len(p['files'])} files ({shown}): {kinds}")
    return "\n".join(out)


def format_check(r: BinaryCheck, *, limit: int | None = None) -> str:
    """Every finding of one binary (at most ``limit`` of each kind), its notes, then its summary."""
    what = "" if r.linked else " (relocatable object: sections placed, relocations applied)"
    out = [f"{r.path}: SFrame V{r.version} ({', '.join(r.flags) or 'no flags'}) via {r.via}{what}"]
    shown: dict[str, int] = {}
    for f in r.findings:
        shown[f.kind] = shown.get(f.kind, 0) + 1
        if limit is not None and shown[f.kind] > limit:
            continue
        out.append(f"  {f.kind}: {f.message}")
    for kind, n in shown.items():
        if limit is not None and n > limit:
            out.append(f"  {kind}: ... {n - limit} more")
    for note in r.notes:
        out.append(f"  note: {note}")
    out.append("  " + format_summary(r))
    return "\n".join(out)


def format_summary(r: BinaryCheck) -> str:
    """The counts the verdict rests on, then the verdict: "clean", the findings by kind, and
    (never "clean" then) why the check is no verdict (:attr:`BinaryCheck.no_verdict`)."""
    counts = r.by_kind()
    parts = [", ".join(f"{counts[k]} {k}" for k in KINDS if counts.get(k))] if r.findings else []
    if r.no_verdict is not None:
        parts.append(r.no_verdict)
    return f"{_counts([r])}: {'; '.join(parts) or 'clean'}"


# ------------------------------------------------------------------------------------ dump


def objdump_sframe(table: SFrameTable, name: str | None = None) -> str:
    """``objdump --sframe NAME`` as the binutils that writes the section's version prints it.

    ``name`` is the file name objdump would print (the path as given on its command line).
    """
    sec = table.section
    h = sec.header
    lines = ["", f"{name or table.source}:     file format elf64-x86-64", "",
             "Contents of the SFrame section .sframe:", "  Header :", "",
             f"    Version: SFRAME_VERSION_{h.version}"]
    lines += _flag_lines(h.version, h.flags)
    if h.version >= F.SFRAME_VERSION_2:
        if h.cfa_fixed_fp_offset != F.CFA_FIXED_OFFSET_INVALID:
            lines.append(f"    CFA fixed FP offset: {h.cfa_fixed_fp_offset}")
        if h.cfa_fixed_ra_offset != F.CFA_FIXED_OFFSET_INVALID:
            lines.append(f"    CFA fixed RA offset: {h.cfa_fixed_ra_offset}")
    lines += [f"    Num FDEs: {h.num_fdes}", f"    Num FREs: {h.num_fres}", "", "  Function Index :"]
    for fde in sec.fdes:
        lines.append("")
        attrs = ("S" if fde.signal_frame else "") + ("F" if fde.flex else "")
        lines.append(f"    func idx [{fde.index}]: pc = {fde.func_start:#x}, size = {fde.func_size} bytes"
                     + (f', attr = "{attrs}"' if attrs else ""))
        lines.append(f"    {'STARTPC[m]' if fde.pcmask else 'STARTPC':<16}{'CFA':<10}{'FP':<10}{'RA':<13}")
        for fre in sec.fres(fde):
            startpc = fre.start if fde.pcmask else fde.func_start + fre.start
            cols = fre_columns(sec, fde, fre)
            if cols is None:
                lines.append(f"    {startpc:016x}  RA undefined")
            else:
                cfa, fp, ra = cols
                lines.append(f"    {startpc:016x}  {cfa:<10}{fp:<10}{ra:<13}")
    return "\n".join(lines) + "\n"


def objdump_sframe_archive(name: str, members: list[tuple[str, SFrameTable | None]]) -> str:
    """``objdump --sframe NAME`` of an archive: a line naming it, then each ELF member as
    :func:`objdump_sframe` prints it, or objdump's line for a member without the section."""
    out = [f"In archive {name}:\n"]
    for member, table in members:
        if table is None:
            out.append(f"\n{member}:     file format elf64-x86-64\n\nNo .sframe section present\n\n")
        else:
            out.append(objdump_sframe(table, member))
    return "".join(out)


def _flag_lines(version: int, flags: int) -> list[str]:
    if version <= F.SFRAME_VERSION_2 and not flags & F.F_FDE_FUNC_START_PCREL:
        if flags & F.F_FRAME_POINTER:
            name = F.FLAG_NAMES[F.F_FRAME_POINTER]
        elif flags & F.F_FDE_SORTED:
            name = F.FLAG_NAMES[F.F_FDE_SORTED]
        else:
            name = "NONE"
        return [f"    Flags: {name}"]
    names = [n for bit, n in F.FLAG_NAMES.items() if flags & bit] or ["NONE"]
    first = "    Flags: "
    return [(first if i == 0 else " " * len(first)) + n + ("," if i < len(names) - 1 else "")
            for i, n in enumerate(names)]


def fre_columns(sec: SFrameSection, fde: SFrameFDE, fre: SFrameFRE) -> tuple[str, str, str] | None:
    """The CFA, FP and RA columns objdump prints for ``fre``; None for "RA undefined"."""
    h = sec.header
    if fre.cfa is None:
        return None
    if not fde.flex:
        cfa = f"{fre.base_reg}+{fre.cfa.offset}"
        fixed_ra = h.cfa_fixed_ra_offset != 0
        fp = _saved(fre.fp, fre.datawords[1 if fixed_ra else 2]) if fre.fp is not None else "u"
        if fre.ra_padding:
            ra = "U"
        elif fre.ra is not None:
            ra = _saved(fre.ra, fre.datawords[1])
        elif h.version >= F.SFRAME_VERSION_2 and h.cfa_fixed_ra_offset != F.CFA_FIXED_OFFSET_INVALID:
            ra = "f"
        else:
            ra = "u"
    else:
        cfa = _loc(fre.cfa)
        fp = _loc(fre.fp) if fre.fp is not None else "u"
        if fre.ra_padding:
            ra = "U"
        elif fre.ra is not None:
            ra = _loc(fre.ra)
        else:
            ra = "f" if h.cfa_fixed_ra_offset != F.CFA_FIXED_OFFSET_INVALID else "u"
    if fre.mangled_ra:
        ra += "[s]"
    return cfa, fp, ra


def _saved(loc, stored: int) -> str:
    """A default FDE's RA/FP column: ``c-8`` (saved at CFA-8), or ``rN`` where an s390x V2 offset
    names the register holding the value (libsframe prints the register of ``stored >> 1``)."""
    return f"c{loc.offset:+d}" if loc.deref else f"r{stored >> 1}"


def _loc(loc: Location) -> str:
    """A flexible FRE's column: ``reg+off`` for a register's value plus an offset, ``(reg+off)``
    for the word there, and ``c+off`` for a CFA-based entity whether dereferenced or not.

    libsframe's dump (2.46+) reads a control word's deref bit only when its reg_p bit names a
    register: for a CFA-based FP or RA (reg_p 0, the usual "saved at CFA-16") it prints
    ``c%+d`` as a default FDE's column, never bracketed (binutils' own test
    cfi-sframe-x86_64-ra-undefined-flex-1 shows ``c-16``; guest_programs/sframe_cases/flex.s
    holds every form gas writes, tests/unit/sframe/test_objects.py compares them with sid's
    objdump byte for byte)."""
    if loc.base == "cfa":
        return f"c{loc.offset:+d}"
    return f"({loc.base}{loc.offset:+d})" if loc.deref else f"{loc.base}{loc.offset:+d}"
