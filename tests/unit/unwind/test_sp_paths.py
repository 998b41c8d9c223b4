"""CodeFacts.sp_paths on code assembled by binutils' ``as``: the paths from a CFI row's start to
an IP, including one that leaves the window and comes back (Go's nanotime1: ``je`` to a syscall
fallback after the ret, whose ``jmp`` rejoins at the vDSO call's return), and the refusal of a
branch into the window from code the start does not reach (a path the walk would not see)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from harness.memory import BufferMemory
from harness.unwind.code import CodeFacts, Function
from harness.unwind.maps import AddressSpace
from tests.support.gating import require

BASE = 0x401000

# Labels: s (the row's start), e (the IP the paths go to).
SOURCE = """
    .text
    .globl  out_and_back
out_and_back:                 # nanotime1's shape
    push    %rbp
s1: sub     $0x10, %rsp
    test    %rdi, %rdi
    je      fallback
    call    *%rax
e1: add     $0x10, %rsp
    pop     %rbp
    ret
fallback:
    sub     $0x8, %rsp
    jmp     e1
    .globl  from_before
from_before:                  # a branch from before the start into the window
    push    %rbp
    test    %rdi, %rdi
    jne     e2
s2: sub     $0x10, %rsp
    nop
e2: add     $0x10, %rsp
    pop     %rbp
    ret
    .globl  dead_branch
dead_branch:                  # an unreached branch after the ret into the window
    push    %rbp
s3: sub     $0x10, %rsp
    nop
e3: add     $0x10, %rsp
    pop     %rbp
    ret
    jmp     e3
    .globl  to_the_start
to_the_start:                 # an unreached branch to the start itself: every path begins there
    push    %rbp
s5: sub     $0x10, %rsp
    nop
e5: add     $0x10, %rsp
    pop     %rbp
    ret
    jmp     s5
    .globl  dead_fallthrough
dead_fallthrough:             # unreached code that falls (no branch) into the window
s6: sub     $0x10, %rsp
    jmp     e6
    nop
e6: add     $0x10, %rsp
    ret
    .globl  past_the_end
past_the_end:                 # a branch back to the IP reached only through the IP
s4: sub     $0x8, %rsp
e4: nop
    jmp     e4
"""


@pytest.fixture(scope="module")
def code(tmp_path_factory):
    """(CodeFacts over the assembled bytes at BASE, {symbol: address})."""
    require(shutil.which("as") is not None and shutil.which("objcopy") is not None, "binutils (as, objcopy)")
    d = tmp_path_factory.mktemp("sp-paths")
    (d / "f.s").write_text(SOURCE)
    subprocess.run(["as", "--64", "-o", str(d / "f.o"), str(d / "f.s")], check=True, timeout=60)
    subprocess.run(["objcopy", "-O", "binary", "-j", ".text", str(d / "f.o"), str(d / "f.bin")], check=True,
                   timeout=60)
    nm = subprocess.run(["nm", "-n", str(d / "f.o")], check=True, capture_output=True, text=True, timeout=60).stdout
    syms = {name: BASE + int(addr, 16) for addr, _kind, name in (line.split() for line in nm.splitlines())}
    memory = BufferMemory({BASE: (d / "f.bin").read_bytes()})
    return CodeFacts(AddressSpace([], memory=memory), memory), syms


def _function(syms, name: str, after: str) -> Function:
    return Function(name, syms[name], syms[after] - syms[name], "f.o")


def test_a_path_that_leaves_the_window_and_comes_back(code):
    facts, syms = code
    paths = facts.sp_paths(_function(syms, "out_and_back", "from_before"), syms["s1"], syms["e1"])
    assert paths is not None
    assert sorted(p.delta for p in paths) == [(-24, -24), (-16, -16)]
    assert all(p.moved for p in paths)


def test_a_branch_from_before_the_start_into_the_window_refuses(code):
    facts, syms = code
    assert facts.sp_paths(_function(syms, "from_before", "dead_branch"), syms["s2"], syms["e2"]) is None
    # ... but not where the window holds its source: from the function's start, both ways
    paths = facts.sp_paths(_function(syms, "from_before", "dead_branch"), syms["from_before"], syms["e2"])
    assert sorted(p.delta for p in paths) == [(-24, -24), (-8, -8)]


def test_what_enters_at_the_start_or_by_falling_through_does_not_refuse(code):
    facts, syms = code
    paths = facts.sp_paths(_function(syms, "to_the_start", "dead_fallthrough"), syms["s5"], syms["e5"])
    assert [p.delta for p in paths] == [(-16, -16)]
    paths = facts.sp_paths(_function(syms, "dead_fallthrough", "past_the_end"), syms["s6"], syms["e6"])
    assert [p.delta for p in paths] == [(-16, -16)]


def test_a_branch_no_path_from_the_start_reaches_refuses(code):
    facts, syms = code
    assert facts.sp_paths(_function(syms, "dead_branch", "to_the_start"), syms["s3"], syms["e3"]) is None


def test_a_branch_reached_only_through_the_ip_refuses(code):
    # what start reaches is followed up to the IP, not through it: the jmp after it is code the
    # start does not reach on its way, so its branch into (start, end] is a way this walk misses
    facts, syms = code
    f = Function("past_the_end", syms["past_the_end"], syms["e4"] + 3 - syms["past_the_end"], "f.o")
    assert facts.sp_paths(f, syms["s4"], syms["e4"]) is None
    # without that jmp (a function one instruction shorter), the one path; a CodeFacts of its own,
    # as its facts are memoized by the function's start
    f = Function("past_the_end", syms["past_the_end"], syms["e4"] + 1 - syms["past_the_end"], "f.o")
    fresh = CodeFacts(facts.space, facts.memory)
    assert [p.delta for p in fresh.sp_paths(f, syms["s4"], syms["e4"])] == [(-8, -8)]
