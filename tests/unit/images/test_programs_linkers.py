"""The guest programs' linker and PIE dimensions (harness/images/programs.py ``Variant.linker``,
``Variant.pie``): callchain.c built by ld.bfd, gold, mold and lld, PIE and not, static and
dynamic, each flag shown to have taken effect in the ELF (readelf): e_type, PT_INTERP, DF_1_PIE,
and the linker's own mark (mold's and lld's ``.comment`` line, gold's ``.note.gnu.gold-version``,
ld.bfd's separate-code text page).  The tags of the variants that existed before stay what they
were (guest paths, caches and tests use them)."""

from __future__ import annotations

import shutil

import pytest

from harness.images.errors import ImageError
from harness.images.link import LINKER_BINARY, LINKERS
from harness.images.programs import Variant, build_program, cflags
from harness.unwind.maps import load_image
from tests.support.gating import require
from tests.support.layout import shares_file_pages
from tests.support.toolchains import need

DF_1_PIE = 0x08000000

# gcc -static-pie passes --no-dynamic-linker, which gold 1.16 does not know (the test shows the
# refusal, and skips in CI too: it is the linker's answer)
REFUSED = {("gold", True, True): "--no-dynamic-linker: unknown option"}


@pytest.mark.parametrize("v,tag", [
    (Variant(), "fp-sframe-static-64"),
    (Variant(static=False), "fp-sframe-dyn-64"),
    (Variant(bits=32), "fp-static-32"),
    (Variant(static=False, shadow=True), "fp-sframe-dyn-64-shadow"),
    (Variant(frame_pointers=False, opt="-O2"), "nofp-sframe-static-64-O2"),
    (Variant(static=False, pie=True), "fp-sframe-dyn-64"),  # a dynamic program's default
    (Variant(pie=False), "fp-sframe-static-64"),  # a static one's
    (Variant(static=False, pie=False), "fp-sframe-dyn-64-nopie"),
    (Variant(pie=True), "fp-sframe-static-64-pie"),
    (Variant(static=False, pie=False, linker="mold", shadow=True, opt="-O2"), "fp-sframe-dyn-64-shadow-nopie-mold-O2"),
    (Variant(linker="lld"), "fp-sframe-static-64-lld"),
    (Variant(bits=32, static=False, linker="gold"), "fp-dyn-32-gold"),
])
def test_tags_round_trip_and_the_old_ones_do_not_change(v, tag):
    assert v.tag == tag
    assert Variant.parse(tag) == v and Variant.parse(tag).tag == tag


def test_defaults_build_with_the_flags_they_had():
    """No flag for the toolchains' own defaults: the builds (and cache keys) of the old variants."""
    host = need("host")
    for v in (Variant(), Variant(static=False), Variant(bits=32), Variant(shadow=True)):
        flags = cflags(host, v)
        assert not {"-pie", "-no-pie", "-fPIE", "-fno-PIE", "-static-pie"} & set(flags), (v, flags)
        assert not [f for f in flags if f.startswith("-fuse-ld")]
    assert "-static-pie" in cflags(host, Variant(pie=True)) and "-static" not in cflags(host, Variant(pie=True))
    assert {"-fno-PIE", "-no-pie"} <= set(cflags(host, Variant(static=False, pie=False)))
    assert Variant(pie=None).pie is False and Variant(static=False).pie is True


def test_an_unknown_linker_is_refused():
    with pytest.raises(ImageError, match=r"unknown linker 'ld'; known: bfd, gold, mold, lld"):
        Variant(linker="ld")


def _comment(img) -> str:
    sec = img.elf.get_section_by_name(".comment")
    return sec.data().decode(errors="replace") if sec is not None else ""


def _check_linker(img, linker: str) -> None:
    comment = _comment(img)
    gold_note = img.elf.get_section_by_name(".note.gnu.gold-version") is not None
    assert ("mold " in comment) == (linker == "mold"), comment
    assert ("LLD " in comment) == (linker == "lld"), comment
    assert gold_note == (linker == "gold")
    if linker == "bfd":  # -z separate-code, ld.bfd's default on x86-64: the text in file pages of its own
        text = next(s for s in img.elf.iter_segments() if s["p_type"] == "PT_LOAD" and s["p_flags"] & 1)
        assert text["p_offset"] % 0x1000 == 0 and text["p_offset"] > 0
    if linker in ("mold", "lld"):  # the layout of issue 34: PT_LOADs sharing a file page
        assert shares_file_pages(img.loads), img.loads


def _check_pie(img, v: Variant, tc_name: str) -> None:
    elf = img.elf
    assert elf["e_type"] == ("ET_DYN" if v.pie else "ET_EXEC")
    interp = next((s.get_interp_name() for s in elf.iter_segments() if s["p_type"] == "PT_INTERP"), None)
    if v.static:
        assert interp is None
    else:
        assert interp == f"/tc/{tc_name}/lib64/ld-linux-x86-64.so.2"
    dyn = elf.get_section_by_name(".dynamic")
    flags1 = next((t.entry.d_val for t in dyn.iter_tags() if t.entry.d_tag == "DT_FLAGS_1"), 0) if dyn else 0
    assert bool(flags1 & DF_1_PIE) == v.pie, hex(flags1)


def _build(tc_name: str, linker: str, pie: bool, static: bool):
    require(shutil.which(LINKER_BINARY[linker]) is not None, f"{LINKER_BINARY[linker]} is not installed (./dev)")
    v = Variant(static=static, pie=pie, linker=linker)
    assert v.pie is pie
    refused = REFUSED.get((linker, pie, static))
    try:
        p = build_program("callchain", need(tc_name), v)
    except ImageError as exc:
        if refused is None or refused not in str(exc):
            raise
        pytest.skip(f"{linker} refuses {v.tag}: {refused}")
    assert refused is None, f"{linker} now builds {v.tag}: REFUSED is out of date"
    assert p.guest_path.endswith(f"/callchain-{v.tag}")
    return p, v


@pytest.mark.parametrize("static", [False, True], ids=["dyn", "static"])
@pytest.mark.parametrize("pie", [False, True], ids=["nopie", "pie"])
@pytest.mark.parametrize("linker", LINKERS)
def test_each_linker_and_pie_flag_takes_effect(linker, pie, static):
    p, v = _build("host", linker, pie, static)
    img = load_image(p.path)
    _check_pie(img, v, "host")
    _check_linker(img, linker)
    if not static:  # the root's loader and libraries, where the interpreter path points
        assert any(guest.endswith("/libc.so.6") for _, guest in p.runtime)


@pytest.mark.parametrize("linker", ["gold", "mold", "lld"])
def test_a_roots_object_is_linked_on_the_host_by_a_linker_the_root_lacks(linker):
    """trixie has ld.bfd only: its gcc 14 compiles, the host's gcc links with gold, mold or lld;
    the program still runs on trixie's loader and libc (its interpreter, its runtime files)."""
    p, v = _build("trixie", linker, True, False)
    img = load_image(p.path)
    _check_pie(img, v, "trixie")
    _check_linker(img, linker)
    assert "GCC: (Debian 14." in _comment(img)  # the root's compiler
    trixie = need("trixie")
    assert all(str(host).startswith(str(trixie.root)) for host, _ in p.runtime)
