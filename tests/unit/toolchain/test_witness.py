"""The witness: claims about real binaries asked of the toolchain's own tools, both ways.

A small program (tests/data/witness.c) is built by the host's gcc with each of the four linkers
Debian ships, as a PIE and not, and run on this machine: it prints where its functions are and
stops itself (SIGSTOP), so its /proc/PID/maps is the kernel's ELF loader's and ld.so's own layout,
as in a guest.  Over that real layout:

* the harness's claims (built by :func:`harness.verdicts.claims.claim_at` from the address space
  the harness reads of those maps) are confirmed: the function's bounds, its FDE, its frame set-up;
* the same claims made false -- a link address one page off (the mold PIE's old bias), no FDE
  where readelf shows one, no frame set-up in a function that has one, no .sframe in a module
  with one, a missing PT_GNU_SFRAME where ld.bfd wrote it -- are contradicted, each with the
  tool's own line;
* a contradicted proof turns its pair verdict into a failure (cause-contradicted) that the log
  checker accepts as one.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from harness.toolchain import words
from harness.toolchain.binutils import binutils
from harness.toolchain.witness import CrossExaminer
from harness.unwind.maps import AddressSpace
from harness.verdicts.claims import CONFIRMED, CONTRADICTED, Claim, claim_at, module_claim
from tests.support.gating import require
from tests.support.paths import TEST_DATA

LINKERS = {"bfd": "ld.bfd", "gold": "ld.gold", "mold": "mold", "lld": "ld.lld"}
LAYOUTS = {"pie": ["-fPIE", "-pie"], "nopie": ["-no-pie"]}


@pytest.fixture(scope="module")
def examiner():
    require(binutils("host") is not None, "binutils (readelf, objdump) are not installed")
    with CrossExaminer() as x:
        yield x


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """{(linker, layout): binary}, built on first use by the host's gcc."""
    out = tmp_path_factory.mktemp("witness")
    made: dict[tuple[str, str], Path] = {}

    def get(linker: str, layout: str, sframe: bool = True) -> Path:
        key = (linker, layout + ("-sframe" if sframe else ""))
        if key not in made:
            require(shutil.which(LINKERS[linker]) is not None, f"{LINKERS[linker]} is not installed")
            exe = out / f"witness-{linker}-{key[1]}"
            cmd = ["gcc", "-O1", "-g", "-fno-omit-frame-pointer", *LAYOUTS[layout], f"-fuse-ld={linker}",
                   *(["-Wa,--gsframe"] if sframe else []), str(TEST_DATA / "witness.c"), "-o", str(exe)]
            subprocess.run(cmd, check=True, capture_output=True, timeout=120)
            made[key] = exe
        return made[key]
    return get


class Stopped:
    """The program run on this machine until it stops itself: its maps and where its functions are."""

    def __init__(self, exe: Path):
        self.proc = subprocess.Popen([str(exe)], stdout=subprocess.PIPE, text=True)
        try:
            self.where = {}
            for line in self.proc.stdout:
                name, addr = line.split()
                self.where[name] = int(addr, 16)
                if name == "end":
                    break
            deadline = time.monotonic() + 10
            while _state(self.proc.pid) != "T":
                assert time.monotonic() < deadline, "the program did not stop itself in 10 s"
                time.sleep(0.01)
            self.maps = Path(f"/proc/{self.proc.pid}/maps").read_text()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc.stdout.close()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.fixture(scope="module")
def running(built):
    runs: dict[tuple[str, str], Stopped] = {}

    def get(linker: str, layout: str) -> tuple[Path, Stopped, AddressSpace]:
        exe = built(linker, layout)
        if (linker, layout) not in runs:
            runs[(linker, layout)] = Stopped(exe)
        run = runs[(linker, layout)]
        return exe, run, AddressSpace.from_maps(run.maps)
    yield get
    for r in runs.values():
        r.close()


def _symbol(exe: Path, name: str) -> words.Symbol:
    text = subprocess.run(["readelf", "-sW", str(exe)], capture_output=True, text=True, check=True).stdout
    return next(s for s in words.symbols(text) if s.name == name and s.type == "FUNC")


CASES = [pytest.param(linker, layout, id=f"{linker}-{layout}") for linker in LINKERS for layout in LAYOUTS]


@pytest.mark.parametrize("linker, layout", CASES)
def test_the_harness_claims_on_each_linkers_layout_are_confirmed(linker, layout, running, examiner):
    exe, run, space = running(linker, layout)
    sym = _symbol(exe, "middle")
    at = run.where["middle"]
    # the program's own word: where its function is, against the ELF's symbol
    assert at - sym.value == run.where["bias"] or layout == "nopie" and at == sym.value
    end = at + sym.size
    for claim in (claim_at(space, "function", at, name="middle", start=at, end=end),
                  claim_at(space, "cfi-row", at, row_start=at, cfa=8, ra=-8)):
        t = examiner.examine(claim)
        assert t.outcome == CONFIRMED, t


@pytest.mark.parametrize("linker", ["mold", "lld"])
def test_a_link_address_one_page_off_is_contradicted(linker, running, examiner):
    """What the harness claimed of a mold or lld PIE before one bias per module: each mapping's own
    bias, one page off for the r-x mapping, so that 'no FDE covers' was said of the wrong address."""
    exe, run, space = running(linker, "pie")
    at = run.where["middle"] + 4
    m = space.mapping_at(at)
    right = at - run.where["bias"]
    wrong = at - (m.start - m.offset)  # the first PT_LOAD at the mapping's page-aligned offset: page 0
    assert wrong != right
    claim = Claim("no-eh-frame-fde", str(exe), str(exe), at, wrong, (m.start, m.end, m.offset, m.perms))
    t = examiner.examine(claim)
    assert t.outcome == CONTRADICTED, t
    assert f"link address {right:#x} by the PT_LOAD `LOAD" in t.said and f"{wrong:#x}" in t.said
    # the same fact at the right address: readelf's FDE covers it
    t = examiner.examine(Claim("no-eh-frame-fde", str(exe), str(exe), at, right, claim.mapping))
    assert t.outcome == CONTRADICTED and "FDE cie=" in t.said, t


def test_false_facts_are_contradicted_with_the_tools_line(running, built, examiner):
    exe, run, space = running("bfd", "pie")
    at = run.where["middle"]
    sym = _symbol(exe, "middle")
    end = at + sym.size
    cases = {
        # middle keeps a frame pointer: mov %rsp,%rbp
        claim_at(space, "no-frame-setup", at, start=at, end=end, name="middle"): "mov    %rsp,%rbp",
        claim_at(space, "no-eh-frame-fde", at + 1): "FDE cie=",
        # its bounds one byte short
        claim_at(space, "function", at, name="middle", start=at, end=end - 1): "FUNC",
        # ld.bfd 2.40 wrote PT_GNU_SFRAME for the V1 section
        module_claim(space, "sframe-without-segment", at): "GNU_SFRAME",
        module_claim(space, "no-sframe", at): ".sframe",
        # the second instruction (mov %rsp,%rbp) is the prologue's last: the IP after it is not in it
        claim_at(space, "in-prologue", at + 4, start=at, setup_done=at + 4): "mov",
        claim_at(space, "no-sframe-fde", at + 1): "func idx",
    }
    for claim, line in cases.items():
        t = examiner.examine(claim)
        assert t.outcome == CONTRADICTED and line in t.said, t


def test_each_tools_words_parse_as_pyelftools_reads_the_same_file(built):
    from elftools.elf.elffile import ELFFile

    exe = built("lld", "pie")
    run = lambda *a: subprocess.run(["readelf", *a, str(exe)], capture_output=True, text=True, check=True).stdout  # noqa: E731
    with open(exe, "rb") as f:
        elf = ELFFile(f)
        loads = [(s["p_offset"], s["p_vaddr"], s["p_filesz"]) for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
        secs = {s.name: (s["sh_addr"], s["sh_offset"], s["sh_size"]) for s in elf.iter_sections() if s.name}
        fdes = sorted((e.header["initial_location"], e.header["initial_location"] + e.header["address_range"])
                      for e in elf.get_dwarf_info().EH_CFI_entries() if type(e).__name__ == "FDE")
    assert [(s.offset, s.vaddr, s.filesz) for s in words.program_headers(run("-lW")) if s.type == "LOAD"] == loads
    assert {s.name: (s.addr, s.offset, s.size) for s in words.section_headers(run("-SW"))} == secs
    assert sorted((f.lo, f.hi) for f in words.cfi_fdes(run("-wN", "--debug-dump=frames-interp"))) == fdes


def test_a_contradicted_cause_fails_its_pair_and_the_log_says_so(running, examiner):
    from harness.verdicts.types import EXPLAINED, FAILURE, LOST, Divergence, PairVerdict

    exe, run, space = running("bfd", "pie")
    at = run.where["middle"]
    # a real proof's divergence, with evidence naming a function that in truth sets up rbp
    d = Divergence("fp", "cfi", LOST, 1, 1, (at, 1), (at, 2, 1), cause="fp-epilogue-ip",
                   evidence={"text": "the IP is the ret after pop %rbp", "ip": at})

    class S:  # the stack as a cause's claims read it: the address space only
        pass
    stack = S()
    stack.space = space
    v = examiner.review(stack, PairVerdict("fp", "cfi", EXPLAINED, [d]))
    assert v.verdict == FAILURE and v.reason.startswith("cause-contradicted: fp-epilogue-ip claims at-epilogue-ret")
    rec = v.divergences[0].as_record()
    assert rec["cross"] == CONTRADICTED and rec["text"].count("cause-contradicted") == 1
    assert "push   %rbp" in rec["testimony"][0]["said"]


def _static_space(exe: Path) -> AddressSpace:
    """The address space a static non-PIE binary gets from the kernel's ELF loader: each PT_LOAD at
    its own address (bias 0), as /proc/PID/maps would list it."""
    text = subprocess.run(["readelf", "-lW", str(exe)], capture_output=True, text=True, check=True).stdout
    lines = []
    for s in words.program_headers(text):
        if s.type == "LOAD":
            lo, off = s.vaddr & ~0xFFF, s.offset & ~0xFFF
            hi = (s.vaddr + s.filesz + 0xFFF) & ~0xFFF
            perms = "r" + ("w" if "W" in s.flags else "-") + ("x" if "E" in s.flags else "-") + "p"
            lines.append(f"{lo:x}-{hi:x} {perms} {off:08x} 00:00 1 {exe}")
    return AddressSpace.from_maps("\n".join(lines))


def test_a_shrink_wrapped_frame_setup_is_found_and_the_tools_agree(examiner):
    """The i386 shadow hook of callchain.c (host gcc -O1 -m32 -fno-omit-frame-pointer) sets up
    ebp at byte 24, after its early exit's test: the QEMU suite's compat-fp scenario called it
    "no frame pointer" (fp-frameless-function) until objdump -d contradicted the claim."""
    from harness.images.programs import Variant
    from harness.oracles.shadow import HOOK_ENTER
    from harness.unwind.code import CodeFacts
    from harness.unwind.maps import FileBackedMemory
    from tests.support.toolchains import program

    exe = program("callchain", "host", Variant(bits=32, shadow=True)).path
    space = _static_space(exe)
    sym = _symbol(exe, HOOK_ENTER)
    code = CodeFacts(space, FileBackedMemory(space), 4)
    f = code.function_at(sym.value)
    setup = code.frame_setup(f)
    assert setup is not None and setup.push - f.start >= 24, (setup, f)
    t = examiner.examine(claim_at(space, "no-frame-setup", f.start, start=f.start, end=f.end, name=f.name))
    assert t.outcome == CONTRADICTED and "push   %ebp" in t.said, t
    t = examiner.examine(claim_at(space, "in-prologue", f.start + 5, start=f.start, setup_done=setup.done))
    assert t.outcome == CONFIRMED, t


def test_an_empty_range_asks_no_tool(running, examiner):
    """At a function's first byte no call precedes the IP (hook-window: nothing completed), and a
    symbol of size 0 bounds nothing objdump could show: neither is 'the tool failed'."""
    exe, run, space = running("bfd", "pie")
    at = run.where["middle"]
    t = examiner.examine(claim_at(space, "hook-window", at, start=at, enter="enter", exit="exit"))
    assert t.outcome == CONFIRMED and "none to enter or exit" in t.said, t
    t = examiner.examine(claim_at(space, "no-frame-setup", at, start=at, end=at, name="middle"))
    assert t.outcome == "unverifiable" and "empty range" in t.command and "no instruction" in t.said, t
