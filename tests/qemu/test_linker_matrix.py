"""The four-linker matrix, live: a catalog program built by ld.bfd, gold, mold and lld, as a PIE
and not, static and dynamic, sampled in one guest with every cause cross-examined.

callchain.c (frame pointers, SFrame V1 from the host's gas, the shadow stack) is built 16 ways
(:class:`harness.images.programs.Variant`'s ``linker`` and ``pie``) and run through the live
fuzzer's checker (:func:`harness.fuzz.live.check_live`: one guest, each program as a user's
binary, every proven cause's claims about binaries asked again of readelf and objdump).  For every
build: stacks checked, nothing unexplained, no cause contradicted, and frames of the program's own
text that the CFI oracle stepped through: above 0 (a mold or lld PIE read with one bias per
mapping had every stack "explained" and none of its own frames checked).

A combination a linker refuses is not built: the test names it and the linker's words.
"""

from __future__ import annotations

import pytest

from harness.fuzz.live import LiveProgram, check_live
from harness.images.errors import ImageError
from harness.images.programs import Variant
from tests.support.toolchains import program

pytestmark = pytest.mark.qemu

LINKERS = ("bfd", "gold", "mold", "lld")
SAMPLES = 20
# Combinations a linker refuses, and the words it refuses them with (checked: a refusal of another
# combination, or in other words, fails the test).
REFUSED = {("gold", True, True): "-static-pie"}


def _variants():
    for linker in LINKERS:
        for static in (True, False):
            for pie in (False, True):
                yield Variant(shadow=True, static=static, pie=pie, linker=linker)


def _layout(v: Variant) -> str:
    return f"{'static' if v.static else 'dynamic'} {'PIE' if v.pie else 'non-PIE'}"


def test_every_linkers_layout_gets_its_own_frames_checked(tmp_path):
    built, refused = [], {}
    for v in _variants():
        try:
            p = program("callchain", "host", v)
        except ImageError as exc:
            refused[(v.linker, v.static, v.pie)] = str(exc)
            continue
        built.append((v, LiveProgram(f"cc-{v.linker}-{v.tag}", p.path, ("1000000000", "raw"),
                                     description=f"{v.linker}, {_layout(v)}")))
    assert set(refused) <= set(REFUSED), {k: why[-300:] for k, why in refused.items()}
    for key, why in refused.items():
        assert REFUSED[key] in why, (key, why[-300:])
    outcomes = check_live([lp for _, lp in built], samples=SAMPLES, log_dir=tmp_path)
    rows, bad = [], []
    for (v, lp), out in zip(built, outcomes, strict=True):
        contradicted = out.cross.get("contradicted", 0)
        rows.append(f"MATRIX callchain {v.linker:4} {_layout(v):18} stacks {out.stacks:3} own-frames-checked "
                    f"{out.own_frames_checked:4} causes {out.causes} cross {out.cross} contradicted {contradicted}")
        if not (out.ok and out.own_frames_checked > 0 and not contradicted):
            bad.append(f"{lp.description}: stacks {out.stacks}, own frames checked {out.own_frames_checked}, "
                       f"crash {out.crash}, disagreements {[d.detail for d in out.disagreements[:2]]}, "
                       f"notes {out.notes[:3]}")
    print("\n".join(rows))
    assert not bad, "\n".join(bad)
