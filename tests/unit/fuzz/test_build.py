"""The templates' output compiled and linked by all three toolchain roots (C and C++), and the
programs run: every feature's code works (a signal on an alternate stack, a thread, an exception,
setjmp/longjmp, a noreturn exit), and each loops in getppid for as long as it is told."""

from __future__ import annotations

import dataclasses
import functools
import subprocess

import pytest
from elftools.elf.elffile import ELFFile

from harness.fuzz.build import BuildConfig, build
from harness.fuzz.render import render
from harness.fuzz.shape import FEATURES, Func, Shape
from tests.support.toolchains import need

F = frozenset
# Between them, the two shapes carry every feature and every frame kind.
C_SHAPE = Shape((
    Func("fp", F({"alloca", "signal"}), (1, 2), 2),
    Func("nofp", F({"variadic", "recursion", "tailcall"}), (2, 3), 0),
    Func("build", F({"vla", "setjmp"}), (4, 5), 0),
    Func("build", F({"realign", "thread"}), (4,), 3),
    Func("nofp", F({"redzone", "shrinkwrap"}), (), 0),
    Func("build", F({"vdso"}), (), 1),
))
CXX_SHAPE = Shape((
    Func("fp", F({"exception", "realign"}), (1,), 2),
    Func("nofp", F({"sigaltstack", "alloca"}), (2,), 0),
    Func("build", F({"vla", "noreturn", "cold"}), (), 0),
))
# bigframe apart: its build takes -fstack-clash-protection for the whole unit, which clang with
# gas cannot assemble (test_sid_compilers: clang's .loc of an undeclared file in the probe loop)
BIG_SHAPE = Shape((Func("nofp", F({"bigframe", "recursion"}), (1,), 0), Func("fp", F({"bigframe"}), (), 1)))
assert C_SHAPE.features() | CXX_SHAPE.features() | BIG_SHAPE.features() == set(FEATURES)


@functools.cache
def built(tc: str, lang: str, static: bool, tmp):
    shape = C_SHAPE if lang == "c" else CXX_SHAPE
    return build(shape, BuildConfig(tc, "-O2", False, True, static, "bfd"), tmp / f"{tc}-{lang}-{static}")


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz-build")


def test_the_template_renders_each_feature():
    c, cxx = render(C_SHAPE) + render(BIG_SHAPE), render(CXX_SHAPE)
    for needle in ("alloca(", "char v[", "aligned(32)", "force_align_arg_pointer", "va_arg", "setjmp(jb)",
                   "pthread_create", "SA_ONSTACK" not in c, "return fz_f3(", 'optimize("omit-frame-pointer")',
                   'optimize("no-omit-frame-pointer")', "return fz_f1(d - 1, 1L, 2L, 3L) + 1",
                   "FZ_SPIN_VDSO();", "clock_gettime(CLOCK_MONOTONIC, &fz_ts)", "gettimeofday(&fz_tv, 0)",
                   "fz_touch(big, sizeof big)", "if (d == fz_never)"):
        assert needle is True or needle in c, needle
    for needle in ("try {", "fz_throw(r);", "SA_ONSTACK", "sigaltstack(&ss, 0)", "fz_exit();", "noreturn",
                   "if (__builtin_expect(d >= 0, 0))", "fz_cold_mark(r);"):
        assert needle in cxx, needle
    assert "FZ_SPIN_VDSO" not in cxx  # defined where a leaf uses it only


@pytest.mark.parametrize("tc", ["host", "trixie", "sid"])
@pytest.mark.parametrize("lang", ["c", "c++"])
def test_each_root_compiles_links_and_runs_the_generated_program(tc, lang, tmp):
    need(tc)
    b = built(tc, lang, True, tmp)
    assert b.ok, b.error
    with open(b.binary, "rb") as f:
        elf = ELFFile(f)
        names = {s.name for s in elf.get_section_by_name(".symtab").iter_symbols()}
        assert elf.get_section_by_name(".sframe") is not None
    shape = C_SHAPE if lang == "c" else CXX_SHAPE
    assert {f"fz_f{i}" for i in range(len(shape.funcs))} <= names
    if lang == "c++":
        assert "fz_f2.cold" in names  # cold: gcc -O2 moved the branch into a fragment of its own


@pytest.mark.parametrize("tc", ["host", "trixie", "sid"])
def test_a_big_frame_is_probed_in_a_loop_with_the_cfa_on_r11(tc, tmp):
    """bigframe: the unit is built with stack-clash protection, and gcc's probe loop in the
    frameless function keeps the CFA on r11, in readelf's words; the program runs."""
    need(tc)
    b = build(BIG_SHAPE, BuildConfig(tc, "-O2", False, True, True, "bfd"), tmp / f"{tc}-big")
    assert b.ok, b.error
    assert "-fstack-clash-protection" in b.commands[0]
    frames = subprocess.run(["readelf", "--debug-dump=frames", str(b.binary)], capture_output=True,
                            text=True, timeout=60).stdout
    assert "DW_CFA_def_cfa: r11" in frames
    r = subprocess.run([str(b.binary), "3"], capture_output=True, timeout=60)
    assert r.returncode == 0, r
    # static: runs on this machine whatever glibc the root has; 3 syscalls per leaf, then exits 0
    r = subprocess.run([str(b.binary), "3"], capture_output=True, timeout=60)
    assert r.returncode == 0, r


def test_a_linker_the_root_lacks_links_on_the_host(tmp):
    need("sid")
    b = build(C_SHAPE, BuildConfig("sid", "-O1", True, True, False, "lld"), tmp / "sid-lld")
    assert b.ok, b.error
    assert b.link_toolchain == "host" and b.commands[0].startswith("[sid] gcc")
    assert b.commands[1].startswith("[host] gcc") and "-fuse-ld=lld" in b.commands[1]


def test_a_check_that_compared_nothing_is_a_finding(tmp):
    """The static checker on a generated program whose .eh_frame was taken out (binutils' objcopy):
    sframe check compares no FRE, and says so; the fuzzer does not count it clean."""
    from harness.fuzz.static import StaticChecker

    need("host")
    b = built("host", "c", True, tmp)
    assert b.ok, b.error
    bare = tmp / "no-eh-frame"
    subprocess.run(["objcopy", "--remove-section=.eh_frame", "--remove-section=.eh_frame_hdr", str(b.binary),
                    str(bare)], check=True, capture_output=True, timeout=60)
    found = [f for f in StaticChecker()(dataclasses.replace(b, binary=bare)) if f.kind == "sframe-check"]
    assert [f.detail for f in found if f.detail == "no-verdict"] == ["no-verdict"], [f.detail for f in found]
    assert not [f for f in StaticChecker()(b) if f.detail == "no-verdict"]


def test_gold_cannot_make_a_static_pie_and_the_matrix_never_asks_it(tmp):
    """What `linkable` leaves out of the matrix, gold refuses for real."""
    from hypothesis import given, settings

    from harness.fuzz.build import configs, linkable

    need("host")
    b = build(C_SHAPE, BuildConfig("host", "-O1", True, True, True, "gold", pie=True), tmp / "gold-static-pie")
    assert not b.ok and "exit status" in (b.error or "")
    assert not linkable(BuildConfig("host", "-O1", True, True, True, "gold", pie=True))
    assert linkable(BuildConfig("host", "-O1", True, True, True, "lld", pie=True))

    @settings(max_examples=200, database=None)
    @given(configs(toolchains=("host",)))
    def drawn(c):
        assert linkable(c)
    drawn()


def test_pie_is_the_toolchains_default_unless_said_and_survives_replace():
    """A dynamic build is a PIE and a static one is not unless the config says otherwise; a value
    equal to the default is kept as None, so replace(config, static=True) of a default dynamic
    config is a default static one (ET_EXEC), not a static PIE (test_static's static build was one)."""
    dyn = BuildConfig("host", "-O1", True, True, False, "bfd")
    assert dyn.pie is None and dyn.variant.pie is True and BuildConfig(static=False, pie=True) == dyn.__class__(
        "host", "-O2", True, True, False, "bfd", None)
    static = dataclasses.replace(dyn, static=True)
    assert static.pie is None and static.variant.pie is False and "pie" not in static.flags
    assert dataclasses.replace(dyn, pie=False).flags.endswith("dyn nopie")
    assert BuildConfig(static=True, pie=True).link_flags == "sframe static pie"
