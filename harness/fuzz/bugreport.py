"""``harness fuzz report DIR``: each signature's reproducer as a bug report ready to file.

:func:`gather` reads a reproducer directory (``signature.json``, the source, ``build.sh``, the
binary and the compiler's object), rebuilds it once in a scratch directory (the link's own
warnings, and the checker's view of the object: who produced the defect), and asks the
toolchain's own tools for their words at the address: ``objdump --sframe`` of the binutils that
reads that SFrame version, ``llvm-readobj --sframe`` of a clang toolchain, ``readelf
--debug-dump=frames-interp``, ``readelf -lW``, ``objdump -d``.  :func:`harness.report.finding.
render_report` writes the Markdown.

Who is wrong (the component): a finding in the object before any linker is the assembler's
(clang's integrated assembler, or gas); one the object does not show, in generated code, is the
linker's; what the link alone decides (sections dropped, no PT_GNU_SFRAME, unsorted FDEs, a PLT
stub's FRE) is the linker's; a frame-pointer step is the compiler's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from ..errors import HarnessError
from ..images.link import LINKER_BINARY, linker_version
from ..report.finding import BugReport, Evidence
from ..toolchain.binutils import TIMEOUT as TOOL_TIMEOUT
from ..toolchain.binutils import binutils, reading_sframe
from ..unwind.maps import ElfImage
from .build import BuildConfig, build_source, toolchain
from .campaign import SIGNATURE_JSON, CampaignError, _blocks_at, _register_user, load_reproducer
from .finding import Signature, _decided_by_the_link
from .shape import Shape
from .static import StaticChecker, generated_functions

__all__ = ["KNOWN", "Known", "gather", "reproducer_dirs"]

REPORT_MD = "report.md"


@dataclass(frozen=True)
class Known:
    """What is known of a defect: the producer's code that emits it and what upstream knows."""

    applies: object  # (signature, section name or None, linker binutils version line) -> bool
    producer_source: str
    upstream: str


def _pltgot(sig: Signature, section: str | None, ld: str) -> bool:
    return sig.linker == "bfd" and sig.kind == "sframe-check" and sig.detail == "cfa in runtime code" \
        and section == ".plt.got"


def _bfd_v2(sig: Signature, section: str | None, ld: str) -> bool:
    return sig.linker == "bfd" and (sig.kind == "sframe-dropped" or sig.detail == "empty-section") \
        and "clang" in sig.toolchain and "-gas" not in sig.toolchain


def _lld(sig: Signature, section: str | None, ld: str) -> bool:
    return sig.linker == "lld" and sig.kind == "sframe-check" and sig.detail.split(" ")[0] in (
        "no-pt-gnu-sframe", "fdes-unsorted", "concatenated-not-merged", "pcrel-starts-unflagged", "fde-order")


def _mold(sig: Signature, section: str | None, ld: str) -> bool:
    return sig.linker == "mold" and sig.kind == "sframe-check" and sig.detail.split(" ")[0] in (
        "no-pt-gnu-sframe", "fdes-unsorted", "concatenated-not-merged", "pcrel-starts-unflagged", "fde-order")


def _gold(sig: Signature, section: str | None, ld: str) -> bool:
    return sig.linker == "gold" and sig.kind == "sframe-check" and sig.detail.split(" ")[0] in (
        "no-pt-gnu-sframe", "fdes-unsorted", "concatenated-not-merged", "pcrel-starts-unflagged", "fde-order")


KNOWN = (
    Known(_pltgot,
          "`bfd/elf64-x86-64.c`: `elf_x86_64_sframe_pltgot_fre1` is `{0, {16, 0, ...}, SFRAME_V1_FRE_INFO "
          "(SFRAME_BASE_REG_SP, 1, SFRAME_FRE_OFFSET_1B)}` -- CFA = SP + 16 from the stub's first byte -- and "
          "`bfd/elfxx-x86.c` (`_bfd_x86_elf_create_sframe_plt`, `SFRAME_PLT_GOT`) writes it for every `.plt.got` "
          "entry with `SFRAME_FDE_TYPE_PCMASK`.  A `.plt.got` entry is `jmp *name@GOTPCREL(%rip)` (+ `xchg "
          "%ax,%ax`; with IBT `endbr64` first): nothing is pushed, so CFA = SP + 8 throughout, as "
          "`elf_x86_64_sframe_sec_pltn_fre1` (`{8, ...}`) says for the alike `.plt.sec` entries and as ld's own "
          "`.eh_frame` for the stub says.  Introduced by \"ld: generate SFrame stack trace info for .plt.got\" "
          "(PR ld/32298, binutils 2.44); `ld/testsuite/ld-x86-64/sframe-pltgot-1.d` and `sframe-pltgot-2.d` expect "
          "the wrong value (`func idx [1]` of the `.plt.got`: `0+0000 +sp\\+16`).",
          "Not found reported: the search of public trackers and mirrors (sourceware bugzilla is not indexed "
          "here) found the commit and its tests, no report of the offset.  Checked by hand against binutils' "
          "source (bminor/binutils-gdb: bfd/elf64-x86-64.c, ld/testsuite/ld-x86-64/sframe-pltgot-*.d)."),
    Known(_bfd_v2,
          "binutils 2.46 moved to SFrame V3: gas and ld generate and link V3 only, and ld.bfd's SFrame input "
          "parser (`bfd/elf-sframe.c`) rejects another version with \"unexpected SFrame format version N\" and "
          "\"SFrame section ignored\" -- an error message on a link that still exits 0.  LLVM 22/23's "
          "emitter (`llvm/lib/MC/MCSFrame.cpp`, PRs 150509, 151223, 158154, 165322) writes "
          "`SFRAME_VERSION_2`.  Where no other input has SFrame (a static or non-PIE link: no `.plt.got` "
          "SFrame of ld's own), ld still writes a 0-byte `SHT_GNU_SFRAME` `.sframe` output section, which "
          "binutils' own `objdump --sframe` rejects (\"SFrame decode failure: Corrupt SFrame.\").",
          "Known as a design decision on the binutils side (\"In the next GNU Binutils release, GNU as and ld will "
          "only generate SFrame V3; SFrame V2 will not be supported for generation nor linking\", binutils commit "
          "c1ca6c6b, Indu Bhagat, 2026-01-16; the wild linker followed: wild-linker/wild#1898).  No LLVM issue "
          "found for V3 output; what is worth filing: a silently empty SFrame for every clang object under "
          "`--gsframe` with ld.bfd >= 2.46 (an \"error\" and exit status 0), the 0-byte output section its own "
          "objdump calls corrupt (the class of rui314/mold#1646, there a 0-byte section in gas 2.45's Scrt1.o), "
          "and LLVM's emitter lagging the format."),
    Known(_lld,
          "lld keeps `.sframe` input sections as plain data: its output has no `PT_GNU_SFRAME`, and the FDEs "
          "stay in their input order (no `SFRAME_F_FDE_SORTED`), which `.text.startup`/`.text.unlikely` placement "
          "puts out of address order.",
          "Known: llvm/llvm-project#156667 (SFrame sections need merging by the linker) and #165322 (\"LLD support "
          "is pending some discussion\")."),
    Known(_mold,
          "mold concatenates `.sframe` input sections like any other section.",
          "Known: rui314/mold#1511 (\"Support .sframe\": sections need merging, mold concatenates them)."),
    Known(_gold,
          "gold has no SFrame support: `.sframe` input sections are laid out like any other data.",
          "No report found (gold is deprecated in binutils since 2.44 and gets no new features); a known "
          "limitation, not filed."),
)


def reproducer_dirs(d: Path) -> list[Path]:
    """``d`` itself when it is a reproducer, else its reproducer subdirectories (a campaign's)."""
    d = Path(d)
    if (d / SIGNATURE_JSON).is_file():
        return [d]
    subs = sorted(p for p in d.iterdir() if (p / SIGNATURE_JSON).is_file()) if d.is_dir() else []
    if not subs:
        raise CampaignError(f"{d}: neither a reproducer directory nor a campaign's (no {SIGNATURE_JSON} in it "
                            "or its subdirectories)")
    return subs


_OBJECT_WHERE = re.compile(r"the object: (fz_\w+)\+(0x[0-9a-f]+)")


def _in_program(binary: Path, message: str) -> int | None:
    """The program's address of an object finding's ``fz_fN+0xOFF`` (its function's symbol in the
    linked program plus the offset), or None where the message names none or the program lacks it."""
    m = _OBJECT_WHERE.search(message)
    if m is None or not binary.is_file():
        return None
    fn = next((f for f in generated_functions(ElfImage.from_path(binary)) if f.name == m.group(1)), None)
    return None if fn is None else fn.start + int(m.group(2), 16)


def _section_and_symbol(binary: Path, addr: int) -> tuple[str | None, str | None]:
    with open(binary, "rb") as f:
        elf = ELFFile(f)
        section = next((s.name for s in elf.iter_sections()
                        if s["sh_addr"] and s["sh_addr"] <= addr < s["sh_addr"] + s["sh_size"]
                        and s["sh_flags"] & 0x4), None)
        symbol = None
        symtab = elf.get_section_by_name(".symtab")
        if isinstance(symtab, SymbolTableSection):
            best = None
            for s in symtab.iter_symbols():
                if s["st_info"]["type"] == "STT_FUNC" and s["st_value"] <= addr < s["st_value"] + max(s["st_size"], 1):
                    best = s
            if best is not None:
                symbol = f"{best.name}+{addr - best['st_value']:#x}"
    if symbol is None:  # a PLT stub: objdump's label names it
        host = binutils("host")
        text = host.run("objdump", ["-d", f"--start-address={addr:#x}", f"--stop-address={addr + 1:#x}", str(binary)])
        m = re.search(r"^[0-9a-f]+ <([^>]+)>:", text, re.M)
        if m:
            symbol = m.group(1)
    return section, symbol


_RULE = re.compile(r"cfa=(sp|fp)([+-]\d+) ra=\*\(cfa([+-]\d+)\)")


def _ra_slot(rule: str | None) -> tuple[str, int, int] | None:
    """(base, CFA offset, where the RA is read relative to the base) of a rule's text."""
    m = _RULE.search(rule or "")
    if not m:
        return None
    base, cfa, ra = m.group(1), int(m.group(2)), int(m.group(3))
    return base, cfa, cfa + ra


def _unwinder_text(sframe_rule: str | None, cfi_rule: str | None, where: str) -> str:
    s, c = _ra_slot(sframe_rule), _ra_slot(cfi_rule)
    if not s or not c:
        return (f"At {where} the SFrame rule is `{sframe_rule}` and the CFI row `{cfi_rule}`: an SFrame unwinder "
                "recovers another caller frame than the CFI says.")
    (sb, scfa, sra), (cb, ccfa, cra) = s, c
    text = (f"At {where} an SFrame unwinder (the kernel's unwind_user_sframe, libsframe's stack tracer) takes "
            f"CFA = {sb}{scfa:+d} and reads the return address at {sb}{sra:+d}; the CFI says CFA = {cb}{ccfa:+d} "
            f"with the return address at {cb}{cra:+d}.")
    if sb == cb and sra != cra:
        text += (f" It reads the word {abs(sra - cra)} bytes {'above' if sra > cra else 'below'} the return address "
                 "as the return address (whatever the caller keeps there), and its CFA, the caller's stack "
                 f"pointer, is {abs(scfa - ccfa)} bytes off: the caller is missing or wrong, and every frame "
                 "above it with it.")
    if cb == "sp":
        text += (" A frame-pointer unwinder at this address is no better: nothing set rbp up here, so it reads "
                 "[rbp + 8], the caller's own return address, and the caller is missing from its stack.")
    return text


def _cut(text: str, addr: int | None, keep: int = 80) -> str:
    if addr is not None:
        text = _blocks_at(text, addr)
    lines = text.strip().splitlines()
    return "\n".join(lines[:keep] + ([f"... ({len(lines) - keep} more lines)"] if len(lines) > keep else []))


def _fde_and_cie(text: str, addr: int) -> str:
    """readelf --debug-dump=frames cut to the FDE covering ``addr`` and the CIE it names (whose
    initial instructions are the FDE's first row when the FDE has none of its own)."""
    fde = _blocks_at(text, addr)
    if fde == text:
        return _cut(text, None, 40)
    m = re.search(r"cie=([0-9a-f]+)", fde)
    cie = next((b for b in re.split(r"\n\s*\n", text) if m and b.strip().startswith(m.group(1) + " ")
                and " CIE" in b.splitlines()[0]), "")
    return (cie.strip() + "\n\n" if cie else "") + fde.strip()


def _sframe_version(path: Path) -> int | None:
    """The version byte of the file's .sframe; 0 for a section with no readable header (a 0-byte
    one: the newest objdump is asked), None for no section."""
    with open(path, "rb") as f:
        sec = ELFFile(f).get_section_by_name(".sframe")
        if sec is None:
            return None
        data = sec.data()
    return data[2] if len(data) >= 4 and data[:2] == b"\xe2\xde" else 0


def _sframe_dump(path: Path, addr: int | None, label: str) -> Evidence | None:
    version = _sframe_version(path)
    # binutils 2.47's objdump reads V2 and V3 (2.44's does not recognise some of lld's outputs at all)
    reader = (binutils("sid") or reading_sframe(version)) if version in (0, 2, 3) else \
        reading_sframe(version) if version else None
    if reader is None:
        return None
    try:
        r = subprocess.run([*reader.argv("objdump"), "--sframe", str(path)], capture_output=True, text=True,
                           errors="replace", timeout=TOOL_TIMEOUT, env={**os.environ, "LC_ALL": "C"})
        text = r.stdout + (f"\n{r.stderr.strip()}" if r.stderr.strip() else "")  # its errors are its words too
    except (OSError, subprocess.TimeoutExpired) as exc:
        text = f"{reader.label('objdump')} could not be run: {exc}"
    return Evidence(label, reader.label("objdump"), f"objdump --sframe {path.name}", _cut(text, addr))


def _llvm_readobj(tc, path: Path) -> Evidence | None:
    if not tc.is_clang or tc.prefix is not None:
        return None
    v = tc.cc.rsplit("-", 1)[-1]
    outer, inner = tc.workdir("report")
    try:
        shutil.copy(path, outer / path.name)
        try:
            text = tc.run([f"llvm-readobj-{v}", "--sframe", path.name], cwd=inner, timeout=60).stdout
        except HarnessError as exc:
            text = str(exc)
    finally:
        shutil.rmtree(outer, ignore_errors=True)
    return Evidence("the object, in LLVM's own words", f"llvm-readobj-{v} ({tc.name} root)",
                    f"llvm-readobj-{v} --sframe {path.name}", _cut(text, None, 60))


def _commands(build_sh: str) -> list[str]:
    out = []
    for line in build_sh.splitlines():
        if line.startswith("#!") or line == "set -e" or (line.startswith("# ") and not line.startswith("# [")):
            continue
        out.append(line)
    return out


def gather(d: Path, work: Path) -> BugReport:
    """The bug report of the reproducer in ``d``; ``work``: a scratch directory (emptied after)."""
    meta = load_reproducer(d)
    _register_user(meta)
    sig = Signature.from_json(meta["signature"])
    finding = meta.get("finding") or {}
    config = BuildConfig.from_json(meta["config"])
    tc = toolchain(config.toolchain)
    tcj = meta.get("toolchain") or {}
    link_tc = toolchain(tcj.get("link") or config.toolchain)
    versions = dict(tcj.get("versions") or tc.versions())
    if link_tc is not tc:
        versions.update({f"{k} (link, {link_tc.name})": v for k, v in link_tc.versions().items()})
    if config.linker != "bfd":
        versions[LINKER_BINARY[config.linker]] = linker_version(link_tc, config.linker)
    source = (d / meta["source"]).read_text()
    binary, obj = d / "prog", d / "prog.o"
    addr = finding.get("addr")
    if sig.kind == "sframe-object":
        # the object was checked placed where nothing else is: its address is not the program's;
        # the same instruction in the program is the function's symbol there plus the offset
        addr = _in_program(binary, finding.get("message", ""))
    ev = finding.get("evidence") or {}
    # the rebuild: the link's own words, and the checker's view of the object
    rebuilt = build_source(Shape.from_json(meta["shape"]), source, meta["source"], config, work / "rebuild")
    obj_findings = []
    if rebuilt.ok and config.sframe:
        obj_findings = [f for f in StaticChecker()(rebuilt) if f.kind == "sframe-object"]
    section = symbol = None
    if addr is not None and binary.is_file():
        section, symbol = _section_and_symbol(binary, addr)
    ld_line = link_tc.versions()["ld"] if config.linker == "bfd" else linker_version(link_tc, config.linker)
    linker = f"{LINKER_BINARY[config.linker]} ({ld_line})"
    compiler = f"{Path(tc.cc).name} {tc.gcc_version}"
    detail_kind = sig.detail.split(" ")[0]
    evidence: list[Evidence] = []
    host = binutils("host")
    frames = None
    if binary.is_file() and addr is not None:
        frames = Evidence("expected (the CFI: the FDE covering the address and its CIE)", host.label("readelf"),
                          "readelf --debug-dump=frames prog",
                          _fde_and_cie(host.run("readelf", ["--debug-dump=frames", str(binary)]), addr))
    warnings = "\n".join(line for line in (rebuilt.stderr[-1] if rebuilt.stderr else "").splitlines()
                         if "sframe" in line.lower())
    if sig.kind == "sframe-object":
        component = tc.assembler
        fn = finding.get("function") or "a generated function"
        title = f"{tc.assembler}: SFrame of {fn} disagrees with its own CFI ({sig.detail.split(':')[0]})"
        summary = (f"In the object the compiler wrote (before any linker), {finding.get('message', '')}. "
                   "The CFI (.eh_frame) of the same object is taken as the truth.")
        evidence += [e for e in (_sframe_dump(obj, None, "actual (the object's SFrame)"), _llvm_readobj(tc, obj)) if e]
        if frames is not None:  # the same function's FDE, in the program the object was linked into
            evidence.append(frames)
        unwinder = _unwinder_text(ev.get("sframe_rule") or ev.get("sframe"), ev.get("cfi_rule") or ev.get("cfi"),
                                  f"{fn}")
    elif sig.kind == "sframe-dropped" or detail_kind == "empty-section":
        component = linker
        fns = ev.get("functions") or []
        title = (f"{LINKER_BINARY[config.linker]} drops the SFrame of {tc.assembler}'s object: the output has no "
                 f"SFrame FDE for its functions, and the link exits 0")
        summary = ("The object `prog.o` has an SFrame section with an FDE for each of its functions (below, in "
                   "the tools' words); the linked program has none for them"
                   + (f" ({', '.join(fns[:8])}{' ...' if len(fns) > 8 else ''})" if fns else "")
                   + (" and its `.sframe` output section has 0 bytes" if detail_kind == "empty-section" else "")
                   + ". The link exited 0" + (", saying:" if warnings else ".")
                   + (f"\n\n{_fence_inline(warnings)}" if warnings else ""))
        evidence += [e for e in (_sframe_dump(obj, None, "expected (the object's SFrame)"), _llvm_readobj(tc, obj),
                                 _sframe_dump(binary, None, "actual (the program's SFrame)")) if e]
        unwinder = ("The kernel's SFrame unwinder (and any other SFrame reader) finds no FDE for these functions: "
                    "it falls back to frame pointers, or stops, at every sample inside them -- as if SFrame had "
                    "not been asked for, with nothing at build time saying so but an error line on a link that "
                    "succeeded.")
        addr = None
    elif sig.kind == "sframe-check" and _decided_by_the_link(sig.detail):
        plt = bool(section and section.startswith(".plt"))
        component = linker if (detail_kind != "cfa" or plt) else f"the runtime's objects, linked by {linker}"
        if detail_kind in ("cfa", "ra", "fp"):
            title = (f"{LINKER_BINARY[config.linker]} {_short(ld_line)}: the SFrame FRE of "
                     f"{symbol or 'runtime code'}{f' ({section})' if section else ''} says {ev.get('sframe')}, "
                     f"its own .eh_frame {ev.get('cfi')}")
            summary = (f"Expected: the SFrame row of {symbol or 'the code'} at {addr:#x} gives what the program's "
                       f".eh_frame gives there, `{ev.get('cfi')}`.  Actual: its SFrame FRE gives `{ev.get('sframe')}`"
                       f".  sframe check's words: {finding.get('message', '')}.")
            unwinder = _unwinder_text(ev.get("sframe"), ev.get("cfi"), symbol or f"{addr:#x}")
        else:
            addr = None  # the section's address: no code to show, no CFI row
            title = (f"{LINKER_BINARY[config.linker]} {_short(ld_line)}: the output's .sframe: {detail_kind} "
                     f"({sig.flags} link)")
            summary = f"sframe check of the linked program: {finding.get('message', '')}."
            unwinder = {
                "no-pt-gnu-sframe": "The kernel finds a program's SFrame through PT_GNU_SFRAME only: with none it "
                                    "sees no SFrame at all and unwinds with frame pointers.",
                "fdes-unsorted": "Readers search the FDE table by binary search (the kernel, libsframe): with FDEs "
                                 "out of order they miss functions that are there.",
                "fde-order": "Readers search the FDE table by binary search: an FDE out of order is missed.",
                "concatenated-not-merged": "A reader sees the first input's header and FDEs only; the others' "
                                           "bytes are read as garbage or not at all.",
                "pcrel-starts-unflagged": "Function starts are read section-relative while they are PC-relative: "
                                          "every FDE names the wrong function.",
            }.get(detail_kind, "")
            if detail_kind == "no-pt-gnu-sframe" and binutils("sid") is not None:
                evidence.append(Evidence("actual (the program headers)", binutils("sid").label("readelf"),
                                         "readelf -lW prog", _cut(binutils("sid").run("readelf", ["-lW", str(binary)]),
                                                                  None, 40)))
        evidence += [e for e in (_sframe_dump(binary, addr, "actual (SFrame)"),) if e]
        if frames and addr is not None:
            evidence.append(frames)
    elif sig.kind == "build-failed":
        failed = (d / "build-error.txt").read_text() if (d / "build-error.txt").is_file() else ""
        head = failed.splitlines()[0] if failed else ""
        compiling = " -c " in head
        component = compiler if compiling else linker
        title = f"{component}: the build fails: {sig.detail}"
        lines = [line for line in failed.splitlines()[1:] if "rror" in line][:6]
        summary = (f"Expected: the {'compile' if compiling else 'link'} step succeeds (the campaign builds the "
                   f"same shapes with the other toolchains).  Actual: it fails, saying: "
                   + ("; ".join(f"`{line.strip()}`" for line in lines) or f"`{sig.detail}`") + ".")
        if failed:
            evidence.append(Evidence("actual (the build's own words)", f"{tc.name}'s toolchain",
                                     head.split(": ", 1)[-1].rsplit(" failed", 1)[0], _cut(failed, None, 60)))
        unwinder = ""  # no program: nothing to unwind
        addr = None
    else:
        in_object = any(f.function == finding.get("function") for f in obj_findings)
        component = (compiler if sig.kind == "fp-step" else tc.assembler if in_object else linker)
        title = f"{component}: {sig.kind} at {symbol or finding.get('function')}: {sig.detail}"
        summary = f"{finding.get('message', '')}."
        if sig.kind in ("sframe-step", "sframe-no-fre", "sframe-check"):
            summary += (" The compiler's object shows it too: the assembler's." if in_object else
                        " The compiler's object does not show it: the linker's.")
            evidence += [e for e in (_sframe_dump(binary, addr, "actual (SFrame)"),) if e]
        if frames:
            evidence.append(frames)
        unwinder = _unwinder_text(ev.get("sframe_rule") or ev.get("sframe") or ev.get("fp"),
                                  ev.get("cfi_rule") or ev.get("cfi"), symbol or str(finding.get("function")))
    if binary.is_file() and addr is not None:
        around = [f"--start-address={max(addr - 0x10, 0):#x}", f"--stop-address={addr + 0x20:#x}"]
        evidence.insert(0, Evidence("context (the code)", host.label("objdump"),
                                    "objdump -d " + " ".join(around) + " prog",
                                    _cut(host.run("objdump", ["-d", *around, str(binary)]), None, 40)))
    where = (f"{addr:#x}" + (f" in `{section}`" if section else "") + (f", `{symbol}`" if symbol else "")
             if addr is not None else None)
    known = next((k for k in KNOWN if k.applies(sig, section, versions.get("ld", ""))), None)
    shutil.rmtree(work / "rebuild", ignore_errors=True)
    return BugReport(title=title, component=component, signature=sig.key, versions=versions,
                     source_name=meta["source"], source=source, commands=_commands((d / "build.sh").read_text()),
                     summary=summary, evidence=evidence, address=where, unwinder=unwinder,
                     producer_source=known.producer_source if known else None,
                     upstream=known.upstream if known else None,
                     counts=f"{meta.get('programs', 0)} programs of the campaign ({meta.get('occurrences', 0)} "
                            f"occurrences){', shrunk' if meta.get('shrunk') else ', not shrunk'}",
                     reproducer=str(d))


def _short(version_line: str) -> str:
    """The version number of a ``--version`` line (its last dotted number)."""
    found = re.findall(r"\d+\.\d+(?:\.[\w.]+)?", version_line)
    return found[-1] if found else version_line


def _fence_inline(text: str) -> str:
    return "```\n" + text.strip() + "\n```"
