"""Cross-examination: every claim a cause makes about a binary, asked again of the toolchain's own tools.

:class:`CrossExaminer` takes the claims of a proven divergence (:func:`harness.verdicts.cross.
claims_for`) and answers each with a :class:`~harness.verdicts.claims.Testimony`:

1. The address first.  The claim's run-time address is translated again, without the harness's
   load bias: the ``/proc/PID/maps`` mapping that holds it gives the file offset, and ``readelf
   -lW``'s PT_LOAD whose file bytes hold that offset (the executable one for an executable mapping)
   gives the link-time address.  Where that differs from the harness's, the claim is contradicted
   there: whatever it says, it says it of the wrong address.
2. Then the fact, in the tool's words: ``readelf --debug-dump=frames-interp`` for FDEs, CIE
   augmentations and CFI rows; ``readelf -SW``/``-lW`` for .sframe and PT_GNU_SFRAME; ``readelf
   -sW`` for symbols; ``objdump -d`` for code (prologues, epilogues, calls, writes to rsp);
   ``objdump --sframe`` of the binutils that reads the section's version for SFrame FDEs.

An outcome is *confirmed*, *contradicted* (the testimony quotes the tool's line), or
*unverifiable* (why: no tool reads that SFrame version here, the module has no file, ...).
:meth:`CrossExaminer.review` turns a pair verdict whose proof a tool contradicts into a failure of
its own kind, ``cause-contradicted``, with both claims side by side.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from dataclasses import replace

from ..oracles.base import Stack
from ..verdicts.claims import CONFIRMED, CONTRADICTED, UNVERIFIABLE, Claim, Testimony
from ..verdicts.cross import NO_CLAIMS, claims_for
from ..verdicts.types import FAILURE, PairVerdict
from . import words
from .binutils import Binutils, ToolError, binutils, reading_sframe

__all__ = ["CONTRADICTED_CAUSE", "CrossExaminer"]

log = logging.getLogger(__name__)

CONTRADICTED_CAUSE = "cause-contradicted"
# The testimony of a proof that names no binary here (an address in no mapped ELF file; a signal
# frame read by the kernel's own layout from the task's memory).
NOTHING_TO_ASK = {"outcome": UNVERIFIABLE, "said": "the proof names no binary file a tool could read here",
                  "claimed": "", "command": ""}
_MOV_SP_FP = ("%rsp,%rbp", "%esp,%ebp")
_CALL = re.compile(r"^(?:\S+ )?call")
# gcc's DRAP realignment in objdump's words: lea 0x8(%rsp),%r10 ... and $0xffffffffffffffe0,%rsp
_DRAP_LEA = re.compile(r"0x[48]\(%[er]sp\),%[er]\w+")
_REALIGN = re.compile(r"\$0xf+[0-9a-f]0,%[er]sp")


class CrossExaminer:
    """Asks the tools; one answer per distinct claim, one run of a tool per question and file."""

    def __init__(self, host: Binutils | None = None):
        self.host = host or binutils("host")
        self._answers: dict[tuple, Testimony] = {}
        self._out: dict[tuple, object] = {}  # a tool's parsed words, per question and file
        self._tmp: str | None = None
        self._files: dict[int, str] = {}

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> CrossExaminer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- a pair verdict ------------------------------------------------------------------------
    def review(self, stack: Stack, v: PairVerdict) -> PairVerdict:
        """``v`` with each proven divergence's claims cross-examined; a verdict whose proof a tool
        contradicts becomes a failure (the divergence keeps its cause and carries the testimony)."""
        if not v.divergences:
            return v
        divs, contradicted = [], []
        for d in v.divergences:
            if not d.explained:
                divs.append(d)
                continue
            if d.cause in NO_CLAIMS:
                divs.append(d)  # its proof rests on no fact about a binary: nothing to ask
                continue
            said = [self.examine(c) for c in claims_for(stack, d)]
            outcome = _overall(said)
            records = tuple(t.as_record() for t in said) or (NOTHING_TO_ASK,)
            d = replace(d, testimony=records, cross=outcome)
            if outcome == CONTRADICTED:
                contradicted.append(d)
            divs.append(d)
        if contradicted:
            first = contradicted[0]
            t = next(t for t in first.testimony if t["outcome"] == CONTRADICTED)
            reason = (f"{CONTRADICTED_CAUSE}: {first.cause} claims {t['claimed']}; {t['command']} says: {t['said']}")
            return replace(v, verdict=FAILURE, divergences=divs, reason=reason)
        return replace(v, divergences=divs)

    # -- one claim -----------------------------------------------------------------------------
    def examine(self, claim: Claim) -> Testimony:
        key = claim.key
        if key not in self._answers:
            try:
                self._answers[key] = self._examine(claim)
            except ToolError as exc:
                self._answers[key] = Testimony(claim, UNVERIFIABLE, f"the tool failed: {exc}", exc.command)
        return self._answers[key]

    def _examine(self, c: Claim) -> Testimony:
        if self.host is None:
            return Testimony(c, UNVERIFIABLE, "no binutils on this machine")
        path = self._file(c)
        if c.address and c.mapping is not None:
            link, why, cmd = self._link(path, c)
            if link is None:
                return Testimony(c, UNVERIFIABLE, why, cmd)
            if c.link is not None and link != c.link:
                return Testimony(c, CONTRADICTED, f"{why}: the harness read it as link address {c.link:#x}", cmd)
        else:
            link = 0  # a fact about the whole module
        check = getattr(self, "_" + c.fact.replace("-", "_"))
        # the fact's own arguments are run-time addresses of the same module: the same delta
        return check(path, c, link, c.address - link)

    def _file(self, c: Claim) -> str:
        if c.host is not None:
            return c.host
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix="harness-witness-")
        k = hash(c.data)
        if k not in self._files:
            p = os.path.join(self._tmp, f"{c.module.strip('[]/').replace('/', '_') or 'image'}-{len(self._files)}")
            with open(p, "wb") as f:
                f.write(c.data or b"")
            self._files[k] = p
        return self._files[k]

    def _tool(self, tool: str, args: list[str], path: str, parse, bu: Binutils | None = None) -> tuple:
        """``parse`` of ``tool args path``'s output, and the command as a testimony names it: run
        and parsed once per question and file (a static glibc's frames-interp is 33,000 lines)."""
        bu = bu or self.host
        st = os.stat(path)
        key = (bu.name, tool, tuple(args), path, st.st_size, st.st_mtime_ns)
        if key not in self._out:
            self._out[key] = parse(bu.run(tool, [*args, path]))
        return self._out[key], f"{bu.label(tool)}: {tool} {' '.join(args)} {os.path.basename(path)}"

    # -- the address ---------------------------------------------------------------------------
    def _link(self, path: str, c: Claim) -> tuple[int | None, str, str]:
        start, _end, offset, perms = c.mapping
        off = offset + c.address - start
        segs, cmd = self._segments(path)
        loads = [s for s in segs if s.type == "LOAD" and s.offset <= off < s.offset + s.filesz]
        if "x" in perms:
            loads = [s for s in loads if "E" in s.flags] or loads
        if not loads:
            why = f"file offset {off:#x} (mapping {start:#x} at offset {offset:#x}) is in no PT_LOAD's file bytes"
            return None, why, cmd
        s = loads[0]
        link = s.vaddr + off - s.offset
        return link, (f"{c.address:#x} is file offset {off:#x} (mapping {start:#x}-{_end:#x} {perms} at offset "
                      f"{offset:#x}), link address {link:#x} by the PT_LOAD `{s.line}`"), cmd

    # -- the facts -----------------------------------------------------------------------------
    def _cfi(self, path: str) -> tuple[list[words.CfiFde], str]:
        return self._tool("readelf", ["-wN", "--debug-dump=frames-interp"], path, words.cfi_fdes)

    def _fde_at(self, path: str, pc: int) -> tuple[words.CfiFde | None, int, str]:
        fdes, cmd = self._cfi(path)
        return next((f for f in fdes if f.lo <= pc < f.hi), None), len(fdes), cmd

    def _no_eh_frame_fde(self, path, c, pc, delta) -> Testimony:
        fde, n, cmd = self._fde_at(path, pc)
        if fde is not None:
            return Testimony(c, CONTRADICTED, f"{fde.line} covers {pc:#x}", cmd)
        return Testimony(c, CONFIRMED, f"none of the {n} FDEs covers {pc:#x}", cmd)

    def _eh_frame_signal_fde(self, path, c, pc, delta) -> Testimony:
        fde, n, cmd = self._fde_at(path, pc)
        if fde is None:
            return Testimony(c, CONTRADICTED, f"none of the {n} FDEs covers {pc:#x}", cmd)
        ok = "S" in fde.augmentation
        return Testimony(c, CONFIRMED if ok else CONTRADICTED,
                         f"{fde.line}: its CIE's augmentation is \"{fde.augmentation}\"", cmd)

    def _symbols(self, path: str) -> tuple[list[words.Symbol], str]:
        return self._tool("readelf", ["-sW"], path, words.symbols)

    def _function(self, path, c, pc, delta) -> Testimony:
        lo, hi, name = c.arg("start") - delta, c.arg("end") - delta, c.arg("name", "")
        syms, cmd = self._symbols(path)
        same = [s for s in syms if s.name == name]
        if any(s.value == lo and s.end == hi for s in same):
            s = next(s for s in same if s.value == lo and s.end == hi)
            return Testimony(c, CONFIRMED, f"`{s.line}`: [{lo:#x}, {hi:#x})", cmd)
        if same:
            return Testimony(c, CONTRADICTED, "; ".join(f"`{s.line}`" for s in same[:3]) +
                             f": not [{lo:#x}, {hi:#x})", cmd)
        # No symbol of that name: a function the harness bounded by its FDE (the vDSO's), or a
        # name the tool does not know.
        fde, _n, fcmd = self._fde_at(path, lo)
        inside = [s for s in syms if s.value <= lo < s.end and s.type in ("FUNC", "IFUNC")]
        if inside:
            return Testimony(c, CONTRADICTED, f"no symbol {name!r}; {lo:#x} is in `{inside[0].line}`", cmd)
        if fde is not None and fde.lo == lo and fde.hi == hi:
            return Testimony(c, CONFIRMED, f"no symbol covers it; {fde.line} is [{lo:#x}, {hi:#x})", fcmd)
        return Testimony(c, CONTRADICTED, f"no symbol {name!r} and no FDE [{lo:#x}, {hi:#x})", f"{cmd}; {fcmd}")

    def _code(self, path: str, lo: int, hi: int) -> tuple[list[words.Insn], str]:
        if hi <= lo:  # an empty range (a symbol of size 0; the code before a function's first byte)
            return [], f"objdump -d of [{lo:#x}, {hi:#x}): an empty range, nothing to ask"
        return self._tool("objdump", ["-d", "--insn-width=16", f"--start-address={lo:#x}", f"--stop-address={hi:#x}"],
                          path, words.disassembly)

    def _no_frame_setup(self, path, c, pc, delta) -> Testimony:
        lo, hi = c.arg("start") - delta, c.arg("end") - delta
        insns, cmd = self._code(path, lo, hi)
        if not insns:
            return Testimony(c, UNVERIFIABLE, f"objdump shows no instruction in [{lo:#x}, {hi:#x})", cmd)
        setups = _fp_setups(insns)
        if setups:
            push, mov = setups[0]
            return Testimony(c, CONTRADICTED, f"`{push.line}` then `{mov.line}` in [{lo:#x}, {hi:#x})", cmd)
        movs = [i for i in insns if i.mnemonic == "mov" and i.operands in _MOV_SP_FP]
        also = (f" (`{movs[0].line}` follows no push %rbp: rbp holds rsp as any register would)" if movs else "")
        return Testimony(c, CONFIRMED, f"no push %rbp; mov %rsp,%rbp among the {len(insns)} instructions of "
                         f"[{lo:#x}, {hi:#x}){also}", cmd)

    def _in_prologue(self, path, c, pc, delta) -> Testimony:
        lo, done = c.arg("start") - delta, c.arg("setup_done") - delta
        insns, cmd = self._code(path, lo, done + 16)
        setups = _fp_setups(insns)
        if not setups:
            return Testimony(c, CONTRADICTED, f"no push %rbp; mov %rsp,%rbp in [{lo:#x}, {done + 16:#x})", cmd)
        mov = setups[0][1]
        at = [i for i in insns if i.addr == pc]
        if mov.end != done or not at or not lo <= pc < mov.end:
            return Testimony(c, CONTRADICTED, f"`{mov.line}` ends at {mov.end:#x}; {pc:#x} "
                             f"{'is an instruction' if at else 'is no instruction boundary'}", cmd)
        return Testimony(c, CONFIRMED, f"`{at[0].line}` comes before `{mov.line}`, which ends at {mov.end:#x}", cmd)

    def _at_epilogue_ret(self, path, c, pc, delta) -> Testimony:
        insns, cmd = self._code(path, pc - 1, pc + 1)
        got = {i.addr: i for i in insns}
        before, at = got.get(pc - 1), got.get(pc)
        ok = (at is not None and at.mnemonic.startswith("ret") and before is not None
              and (before.mnemonic == "leave" or (before.mnemonic == "pop" and before.operands in ("%rbp", "%ebp"))))
        shown = "; ".join(f"`{i.line}`" for i in insns) or "nothing"
        return Testimony(c, CONFIRMED if ok else CONTRADICTED, shown, cmd)

    def _call_ends_at(self, path, c, pc, delta) -> Testimony:
        lo, ra = c.arg("start") - delta, c.arg("end") - delta
        insns, cmd = self._code(path, lo, ra)
        last = next((i for i in insns if i.end == ra), None)
        if last is None:
            return Testimony(c, CONTRADICTED, f"no instruction of [{lo:#x}, {ra:#x}) ends at {ra:#x}", cmd)
        return Testimony(c, CONFIRMED if _CALL.match(last.mnemonic) else CONTRADICTED, f"`{last.line}`", cmd)

    def _sections(self, path: str) -> tuple[list[words.Section], str]:
        return self._tool("readelf", ["-SW"], path, words.section_headers)

    def _segments(self, path: str) -> tuple[list[words.Segment], str]:
        return self._tool("readelf", ["-lW"], path, words.program_headers)

    def _sframe_layout(self, path: str) -> tuple[words.Section | None, words.Segment | None, str]:
        secs, scmd = self._sections(path)
        segs, _ = self._segments(path)
        sec = next((s for s in secs if s.name == ".sframe"), None)
        seg = next((s for s in segs if s.type in ("GNU_SFRAME", "LOOS+0x474e554")), None)
        return sec, seg, f"{scmd} and -lW"

    def _no_sframe(self, path, c, pc, delta) -> Testimony:
        sec, seg, cmd = self._sframe_layout(path)
        if sec is None and seg is None:
            return Testimony(c, CONFIRMED, "no .sframe section, no GNU_SFRAME program header", cmd)
        return Testimony(c, CONTRADICTED, "; ".join(f"`{x.line}`" for x in (sec, seg) if x is not None), cmd)

    def _sframe_without_segment(self, path, c, pc, delta) -> Testimony:
        sec, seg, cmd = self._sframe_layout(path)
        if sec is not None and seg is None:
            return Testimony(c, CONFIRMED, f"`{sec.line}`; no GNU_SFRAME program header", cmd)
        said = f"GNU_SFRAME `{seg.line}`" if seg is not None else "no .sframe section"
        return Testimony(c, CONTRADICTED, said, cmd)

    def _sframe(self, path: str) -> tuple[list[words.SFrameFde] | None, str]:
        """The SFrame FDEs as the objdump that reads the section's version prints them; None and
        why where no tool here reads it."""
        sec, _seg, cmd = self._sframe_layout(path)
        if sec is None:
            return None, f"no .sframe section ({cmd})"
        with open(path, "rb") as f:
            f.seek(sec.offset)
            head = f.read(4)
        if len(head) < 4 or head[:2] != b"\xe2\xde":
            return None, f"the .sframe section at file offset {sec.offset:#x} has no SFrame magic"
        bu = reading_sframe(head[2])
        if bu is None:
            return None, f"no objdump here reads SFrame version {head[2]} (its toolchain root is not built)"
        return self._tool("objdump", ["--sframe"], path, words.sframe_fdes, bu)

    def _no_sframe_fde(self, path, c, pc, delta) -> Testimony:
        fdes, cmd = self._sframe(path)
        if fdes is None:
            return Testimony(c, UNVERIFIABLE, cmd)
        cover = next((f for f in fdes if f.pc <= pc < f.end), None)
        if cover is not None:
            return Testimony(c, CONTRADICTED, f"`{cover.line}` covers {pc:#x}", cmd)
        return Testimony(c, CONFIRMED, f"none of the {len(fdes)} FDEs covers {pc:#x}", cmd)

    def _sframe_fde_range(self, path, c, pc, delta) -> Testimony:
        lo, hi = c.arg("start") - delta, c.arg("end") - delta
        fdes, cmd = self._sframe(path)
        if fdes is None:
            return Testimony(c, UNVERIFIABLE, cmd)
        cover = [f for f in fdes if f.pc <= pc < f.end]
        if any(f.pc == lo and f.end == hi for f in cover):
            return Testimony(c, CONFIRMED, f"`{next(f for f in cover if f.pc == lo).line}`", cmd)
        said = "; ".join(f"`{f.line}`" for f in cover) or f"no FDE covers {pc:#x}"
        return Testimony(c, CONTRADICTED, said, cmd)

    def _in_symbol(self, path, c, pc, delta) -> Testimony:
        syms, cmd = self._symbols(path)
        same = [s for s in syms if s.name == c.arg("name")]
        hit = next((s for s in same if s.value <= pc < s.end), None)
        if hit is not None:
            return Testimony(c, CONFIRMED, f"`{hit.line}` holds {pc:#x}", cmd)
        said = "; ".join(f"`{s.line}`" for s in same[:3]) or f"no symbol {c.arg('name')!r}"
        return Testimony(c, CONTRADICTED, f"{said}: not {pc:#x}", cmd)

    def _no_call_to(self, path, c, pc, delta) -> Testimony:
        lo, hi, target = c.arg("start") - delta, c.arg("end") - delta, c.arg("target")
        insns, cmd = self._code(path, lo, hi)
        if not insns:
            return Testimony(c, UNVERIFIABLE, f"objdump shows no instruction in [{lo:#x}, {hi:#x})", cmd)
        hit = next((i for i in insns if _CALL.match(i.mnemonic) and i.target == target), None)
        if hit is not None:
            return Testimony(c, CONTRADICTED, f"`{hit.line}`", cmd)
        return Testimony(c, CONFIRMED, f"no call to {target} among the {len(insns)} instructions", cmd)

    def _hook_window(self, path, c, pc, delta) -> Testimony:
        lo = c.arg("start") - delta
        insns, cmd = self._code(path, lo, pc)
        done = [i for i in insns if _CALL.match(i.mnemonic) and i.end <= pc]
        enter = [i for i in done if i.target == c.arg("enter")]
        leave = [i for i in done if i.target == c.arg("exit")]
        ok = not enter or bool(leave)
        said = (f"calls completed before {pc:#x}: " + ("; ".join(f"`{i.line}`" for i in enter + leave)
                                                        or f"none to {c.arg('enter')} or {c.arg('exit')}"))
        return Testimony(c, CONFIRMED if ok else CONTRADICTED, said, cmd)

    def _cfi_row(self, path, c, pc, delta) -> Testimony:
        fde, n, cmd = self._fde_at(path, pc)
        if fde is None:
            return Testimony(c, CONTRADICTED, f"none of the {n} FDEs covers {pc:#x}", cmd)
        found = fde.row_at(pc)
        if found is None:
            return Testimony(c, CONTRADICTED, f"{fde.line} has no row at or before {pc:#x}", cmd)
        loc, row = found
        want = (c.arg("row_start") - delta, f"rsp{c.arg('cfa'):+d}", f"c{c.arg('ra'):+d}")
        have = (loc, row.get("CFA"), row.get("ra"))
        said = f"{fde.line}: the row from {loc:#x} says CFA {have[1]}, ra {have[2]}"
        return Testimony(c, CONFIRMED if have == want else CONTRADICTED, said, cmd)

    def _drap_realign(self, path, c, pc, delta) -> Testimony:
        lo = c.arg("start") - delta
        insns, cmd = self._code(path, lo, lo + 32)
        head = insns[:4]
        lea = next((i for i in head if i.mnemonic == "lea" and _DRAP_LEA.fullmatch(i.operands)), None)
        realign = next((i for i in head if i.mnemonic == "and" and _REALIGN.fullmatch(i.operands)), None)
        said = "; ".join(f"`{i.line}`" for i in head) or "nothing"
        ok = lea is not None and realign is not None and lea.addr < realign.addr
        return Testimony(c, CONFIRMED if ok else CONTRADICTED, said, cmd)

    def _writes_rsp(self, path, c, pc, delta) -> Testimony:
        lo, hi = c.arg("start") - delta, c.arg("end") - delta
        insns, cmd = self._code(path, lo, hi)
        w = next((i for i in insns if i.operands.endswith("%rsp") or i.mnemonic in ("push", "pop", "leave")), None)
        if w is not None:
            return Testimony(c, CONFIRMED, f"`{w.line}`", cmd)
        return Testimony(c, CONTRADICTED, f"none of the {len(insns)} instructions of [{lo:#x}, {hi:#x}) writes %rsp",
                         cmd)


def _writes_sp(i: words.Insn) -> bool:
    return i.operands.endswith(("%rsp", "%esp")) or i.mnemonic in ("push", "pop", "leave", "enter") \
        or _CALL.match(i.mnemonic) is not None


def _fp_setups(insns: list[words.Insn]) -> list[tuple[words.Insn, words.Insn]]:
    """Each frame-pointer set-up in ``insns``: a ``mov %rsp,%rbp`` whose last change of rsp before
    it is ``push %rbp`` (rbp then points at the saved rbp, the return address above it).  A mov
    after other pushes or a ``sub ...,%rsp`` (glibc's _dl_get_origin: rbp as a buffer pointer) is
    no frame pointer."""
    out = []
    for k, i in enumerate(insns):
        if i.mnemonic != "mov" or i.operands not in _MOV_SP_FP:
            continue
        before = next((j for j in reversed(insns[:k]) if _writes_sp(j)), None)
        if before is not None and before.mnemonic == "push" and before.operands in ("%rbp", "%ebp"):
            out.append((before, i))
    return out


def _overall(said: list[Testimony]) -> str:
    """A proof is contradicted when any of its claims is, confirmed when every one is (and there
    is one), else unverifiable."""
    if any(t.outcome == CONTRADICTED for t in said):
        return CONTRADICTED
    if said and all(t.outcome == CONFIRMED for t in said):
        return CONFIRMED
    return UNVERIFIABLE
