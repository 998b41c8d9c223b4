"""Property tests of the SFrame decoder.

* Garbage in: random bytes, headers with random counts and offsets, and real sections with bit
  flips, overwritten bytes or truncation.  Only SFrameError (or success) may come out, quickly.
* Round trip: random well-formed sections (V1, V2, V3; PCINC/PCMASK; default and flexible FDEs)
  written by harness.sframe.encode decode to what was written, and rule_for agrees with a
  linear-scan reference at random PCs.
"""

from __future__ import annotations

import time

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from harness.rule import SAME, UNDEFINED, FrameRule, ValueRule
from harness.sframe import SFrameError, SFrameSection
from harness.sframe import format as F
from harness.sframe.encode import FDEData, FREData, ctrl_word, encode_section
from tests.support.sframe_pinned import PINNED
from tests.support.tiers import DEEP

GARBAGE = settings(deadline=2000, suppress_health_check=[HealthCheck.too_slow])
SECTIONS = [p.data for p in PINNED.values()]


MAGIC = (F.SFRAME_MAGIC.to_bytes(2, "little"), F.SFRAME_MAGIC.to_bytes(2, "big"))


def exercise(data: bytes, vaddr: int = 0x2000, pcs: tuple[int, ...] = ()) -> SFrameSection | None:
    """Parse, decode everything and look up: SFrameError is the only failure allowed.  A section
    that parses has the magic and as many FDEs as its header says; returns it (None: refused)."""
    # CPU time, not wall time: the bound catches a parse that runs away on a small input, and must
    # not fail because other processes share the machine's cores.
    t0 = time.process_time()
    try:
        sec = SFrameSection.parse(data, vaddr)
    except SFrameError as exc:
        assert exc.offset is None or 0 <= exc.offset <= max(len(data), 1 << 32)
        return None
    assert data[:2] in MAGIC, f"parsed without the SFrame magic: {data[:2].hex()}"
    assert len(sec.fdes) == sec.header.num_fdes
    probe = list(pcs) + [f.func_start + d for f in sec.fdes[:64] for d in (0, 1, f.func_size // 2, f.func_size - 1)]
    for pc in probe:
        try:
            sec.find_fre(pc)
            sec.rule_for(pc)
        except SFrameError:
            pass
    try:
        sec.decode_all()
    except SFrameError:
        pass
    assert time.process_time() - t0 < 2.0
    return sec


@GARBAGE
@given(st.binary(max_size=512))
def test_random_bytes(data):
    sec = exercise(data)
    assert sec is None or len(data) >= F.LITTLE.header.size  # nothing shorter than a header parses


@GARBAGE
@given(version=st.sampled_from([1, 2, 3]), flags=st.integers(0, 7), abi=st.integers(0, 5),
       aux=st.integers(0, 8), counts=st.tuples(*[st.integers(0, 300)] * 5), body=st.binary(max_size=600),
       order=st.sampled_from(["<", ">"]))
def test_random_header_fields(version, flags, abi, aux, counts, body, order):
    lay = F.LITTLE if order == "<" else F.BIG
    num_fdes, num_fres, fre_len, fdes_off, fres_off = counts
    hdr = lay.header.pack(F.SFRAME_MAGIC, version, flags, abi, 0, -8, aux, num_fdes, num_fres, fre_len,
                          fdes_off, fres_off)
    sec = exercise(hdr + body)
    if sec is not None:  # the header read is the one written
        h = sec.header
        assert (h.version, h.flags, h.abi_arch, h.num_fdes, h.num_fres) == (version, flags, abi, num_fdes, num_fres)


@GARBAGE
@given(which=st.integers(0, len(SECTIONS) - 1), flips=st.lists(st.integers(0, 8 * 400), min_size=1, max_size=6))
def test_bit_flips_in_real_sections(which, flips):
    data = bytearray(SECTIONS[which])
    for bit in flips:
        data[(bit // 8) % len(data)] ^= 1 << (bit % 8)
    sec = exercise(bytes(data))
    if bytes(data) == SECTIONS[which]:  # the flips cancelled out: the real section decodes
        assert sec is not None and sec.header.num_fdes == SFrameSection.parse(SECTIONS[which], 0x2000).header.num_fdes


@GARBAGE
@given(which=st.integers(0, len(SECTIONS) - 1), pos=st.integers(0, 400), value=st.binary(min_size=1, max_size=8))
def test_overwritten_bytes_in_real_sections(which, pos, value):
    data = SECTIONS[which]
    pos %= len(data)
    new = data[:pos] + value + data[pos + len(value):]
    sec = exercise(new)
    if new == data:  # the same bytes written over themselves: the real section still decodes
        assert sec is not None


@GARBAGE
@given(which=st.integers(0, len(SECTIONS) - 1), cut=st.integers(0, 400))
def test_truncated_real_sections(which, cut):
    data = SECTIONS[which]
    cut %= len(data)
    try:
        SFrameSection.parse(data[:cut], 0x2000).decode_all()
    except SFrameError:
        return
    raise AssertionError(f"a section cut to {cut} of {len(data)} bytes decoded")


# --------------------------------------------------------------------------- round trip

offsets = st.one_of(st.integers(-128, 127), st.integers(-40000, 40000), st.integers(-(1 << 31), (1 << 31) - 1))


@st.composite
def flex_entity(draw):
    """(words, rule-maker) for RA or FP in a flexible FRE: absent, padding, or a pair."""
    kind = draw(st.sampled_from(["absent", "pad", "pair"]))
    if kind == "absent":
        return kind, []
    if kind == "pad":
        return kind, [0]
    reg_p = draw(st.booleans())
    regnum = draw(st.integers(0, 31)) if reg_p else 0
    deref = draw(st.booleans()) if reg_p else True  # reg_p=0, deref=0, regnum=0 is the padding word
    return kind, [ctrl_word(regnum, deref=deref, reg_p=reg_p), draw(offsets)]


@st.composite
def fre_words(draw, version: int, flex: bool):
    if version >= 2 and draw(st.integers(0, 9)) == 0:
        return []  # RA undefined
    if not flex:
        return [draw(offsets)] + ([draw(offsets)] if draw(st.booleans()) else [])
    cfa = [ctrl_word(draw(st.integers(0, 31)), deref=draw(st.booleans())), draw(offsets)]
    ra_kind, ra = draw(flex_entity())
    fp_kind, fp = draw(flex_entity())
    if ra_kind == "absent" and fp_kind != "absent":
        ra = [0]  # FP needs the RA slot filled
    return cfa + ra + fp


@st.composite
def sections(draw):
    version = draw(st.sampled_from([1, 2, 3]))
    fdes = []
    addr = base = draw(st.integers(0x1000, 0x7FFF0000))
    for _ in range(draw(st.integers(0, 6))):
        addr += draw(st.integers(0, 64))
        size = draw(st.one_of(st.integers(1, 250), st.integers(256, 3000), st.just(70000)))
        pcmask = draw(st.integers(0, 4)) == 0
        rep = (16 if version == 1 else draw(st.integers(1, 32))) if pcmask else 0
        flex = version == 3 and draw(st.booleans())
        limit = rep - 1 if pcmask else size
        starts = sorted(draw(st.sets(st.integers(0, limit), max_size=6)))
        fres = [FREData(s, draw(fre_words(version, flex)), base_reg=draw(st.integers(0, 1))) for s in starts]
        fdes.append(FDEData(addr, size, fres, pcmask=pcmask, rep_size=rep, flex=flex,
                            signal=version == 3 and draw(st.booleans())))
        addr += size
    pcrel = version == 3 or (version == 2 and draw(st.booleans()))
    flags = F.F_FDE_SORTED | (F.F_FDE_FUNC_START_PCREL if pcrel else 0)
    vaddr = base + draw(st.integers(-0x1000, 1 << 20))  # s32 start fields must reach the functions
    return version, flags, vaddr, fdes


def reference_rule(version: int, fde: FDEData, fre: FREData) -> FrameRule:
    """The rule an FRE denotes, computed straight from what was encoded (AMD64, RA fixed at -8)."""
    w = fre.words
    if not w:
        return FrameRule(ValueRule(UNDEFINED), ValueRule(UNDEFINED), ValueRule(SAME), fde.signal)
    ra = ValueRule("cfa", -8, True)
    if not fde.flex:
        cfa = ValueRule("sp" if fre.base_reg else "fp", w[0])
        fp = ValueRule("cfa", w[1], True) if len(w) > 1 else ValueRule(SAME)
        return FrameRule(cfa, ra, fp, fde.signal)

    def loc(ctrl: int, off: int) -> ValueRule:
        reg = ctrl >> 3
        name = {6: "fp", 7: "sp"}.get(reg, f"r{reg}")
        return ValueRule(name if ctrl & 1 else "cfa", off, bool(ctrl & 2))

    cfa = loc(w[0], w[1])
    rest = w[2:]
    fp = ValueRule(SAME)
    if rest:
        if rest[0] == 0:
            rest = rest[1:]
        else:
            ra, rest = loc(rest[0], rest[1]), rest[2:]
    if rest and rest[0] != 0:
        fp = loc(rest[0], rest[1])
    return FrameRule(cfa, ra, fp, fde.signal)


@DEEP  # 300 built sections (2 s of CPU): the deep tier (tests/support/tiers.py)
@settings(deadline=2000, max_examples=300)
@given(sections(), st.data())
def test_round_trip(spec, data):
    version, flags, vaddr, fdes = spec
    blob = encode_section(fdes, version=version, vaddr=vaddr, flags=flags)
    sec = SFrameSection.parse(blob, vaddr).decode_all()
    assert sec.header.version == version and sec.header.num_fdes == len(fdes)
    assert sec.header.num_fres == sum(len(f.fres) for f in fdes)
    for want, got in zip(fdes, sec.fdes, strict=True):
        assert (got.func_start, got.func_size, got.pcmask, got.flex) == (want.func_start, want.func_size,
                                                                         want.pcmask, want.flex)
        assert got.signal_frame == want.signal
        if want.pcmask:
            assert got.rep_size == want.rep_size
        fres = sec.fres(got)
        assert [f.start for f in fres] == [f.start for f in want.fres]
        assert [f.ra_undefined for f in fres] == [not f.words for f in want.fres]
    for want in fdes:
        for _ in range(5):
            pc = want.func_start + data.draw(st.integers(0, want.func_size - 1))
            off = pc - want.func_start
            key = off % want.rep_size if want.pcmask else off
            rows = [f for f in want.fres if f.start <= key]
            expect = reference_rule(version, want, rows[-1]) if rows else None
            assert sec.rule_for(pc) == expect, (hex(pc), rows[-1] if rows else None)
    if fdes:
        assert sec.rule_for(fdes[0].func_start - 1) is None or fdes[0].func_start == 0
        assert sec.rule_for(fdes[-1].func_start + fdes[-1].func_size) is None


@DEEP  # 150 built sections, each corrupted: the deep tier (tests/support/tiers.py)
@settings(deadline=4000, max_examples=150)
@given(sections())
def test_round_trip_then_corrupt_one_byte(spec):
    """Any single-byte change to a well-formed section still ends in success or SFrameError."""
    version, flags, vaddr, fdes = spec
    blob = bytearray(encode_section(fdes, version=version, vaddr=vaddr, flags=flags))
    assume(len(blob) > 4)
    for pos in range(0, len(blob), max(1, len(blob) // 24)):
        for v in (0x00, 0xFF, blob[pos] ^ 0x80):
            mutated = bytes(blob[:pos]) + bytes([v]) + bytes(blob[pos + 1:])
            exercise(mutated, vaddr)
