"""harness/fuzz/finding.py: what a signature keeps of a finding's build."""

from __future__ import annotations

import pytest

from harness.fuzz.build import BuildConfig
from harness.fuzz.finding import Finding, Signature, build_failed, dedupe
from harness.unwind.sframe_check import LINKER_KINDS

O1 = BuildConfig("sid", "-O1", True, True, False, "bfd")
O3 = BuildConfig("sid", "-O3", False, True, False, "bfd")


@pytest.mark.parametrize("kind, detail", [
    ("sframe-check", "cfa in runtime code"),  # ld.bfd's .plt.got FRE: the same at every -O
    ("sframe-check", "fde-order in generated code"),  # a linker that does not sort
    ("sframe-check", "fdes-unsorted"),
    ("sframe-missing", ""),
])
def test_what_the_link_decides_is_one_signature_across_compile_flags(kind, detail):
    a, b = Finding(kind, detail, O1, "m"), Finding(kind, detail, O3, "m")
    assert a.signature == b.signature and a.signature.flags == "sframe dyn"
    other = Finding(kind, detail, BuildConfig("sid", "-O1", True, True, False, "mold"), "m")
    assert other.signature != a.signature  # another linker, another signature


@pytest.mark.parametrize("kind, detail", [("sframe-check", "cfa in generated code"), ("sframe-step", "cfa"),
                                          ("live-unexplained", "fp vs cfi")])
def test_what_the_compiler_decides_keeps_its_flags(kind, detail):
    a, b = Finding(kind, detail, O1, "m"), Finding(kind, detail, O3, "m")
    assert a.signature != b.signature and a.signature.flags == "-O1 fp sframe dyn"


# ------------------------------------------------------------------------------ the signature's text


def test_a_signatures_key_names_kind_detail_build_and_its_id_is_the_keys_hash():
    import hashlib

    s = Finding("sframe-step", "cfa: sframe cfa=sp+N vs cfi cfa=fp+N", O1, "m").signature
    assert s.key == "sframe-step [cfa: sframe cfa=sp+N vs cfi cfa=fp+N] @ sid/bfd -O1 fp sframe dyn"
    assert s.id == hashlib.sha1(s.key.encode()).hexdigest()[:12] and len(s.id) == 12
    bare = Finding("sframe-missing", "", O3, "m").signature
    assert bare.key == "sframe-missing @ sid/bfd sframe dyn"
    assert bare.id != s.id
    assert s.to_json() == {"kind": "sframe-step", "detail": "cfa: sframe cfa=sp+N vs cfi cfa=fp+N", "toolchain": "sid",
                           "linker": "bfd", "flags": "-O1 fp sframe dyn", "key": s.key, "id": s.id}
    assert Signature.from_json(s.to_json()) == s and Signature.from_json(bare.to_json()) == bare


@pytest.mark.parametrize("detail", [*LINKER_KINDS, "fde-order", "fde-order in generated code", "cfa in runtime code",
                                    "fre-start in runtime code"])
def test_sframe_check_findings_the_link_decides_keep_the_link_flags(detail):
    assert Finding("sframe-check", detail, O1, "m").signature.flags == "sframe dyn"
    static = BuildConfig("host", "-O2", False, True, True, "gold")
    assert Finding("sframe-check", detail, static, "m").signature.flags == "sframe static"


@pytest.mark.parametrize("kind, detail", [("sframe-check", "cfa in generated code"),
                                          ("sframe-check", "runtime code"),  # no " in " before it
                                          ("fp-step", "fde-order"), ("build-failed", "concatenated-not-merged")])
def test_other_findings_keep_the_compile_flags(kind, detail):
    assert Finding(kind, detail, O3, "m").signature.flags == "-O3 nofp sframe dyn"


def test_a_finding_as_json_and_the_build_failed_finding():
    f = Finding("fp-step", "fp: cfi x", O1, "fz_f0+0x3: ...", "fz_f0", 0x1130, {"cfi": {"ip": 1}}, 4)
    assert f.to_json() == {"kind": "fp-step", "detail": "fp: cfi x", "config": O1.to_json(),
                           "message": "fz_f0+0x3: ...", "function": "fz_f0", "addr": 0x1130,
                           "evidence": {"cfi": {"ip": 1}}, "count": 4}
    plain = Finding("fp-step", "d", O1, "m")
    assert (plain.function, plain.addr, plain.evidence, plain.count) == (None, None, {}, 1)

    class Failed:
        config, error = O3, "ld returned # exit status"

    (b,) = build_failed(Failed())
    assert (b.kind, b.detail, b.config, b.message) == ("build-failed", "ld returned # exit status", O3,
                                                      "the build failed: ld returned # exit status")
    Failed.error = None
    (b,) = build_failed(Failed())
    assert (b.detail, b.message) == ("", "the build failed: None")


def test_dedupe_keeps_the_first_finding_of_each_signature_with_the_counts_summed():
    a1 = Finding("fp-step", "fp", O1, "first", addr=1, count=2)
    b = Finding("sframe-step", "cfa", O1, "other", addr=2)
    a2 = Finding("fp-step", "fp", O1, "second", addr=3, count=3)
    a3 = Finding("fp-step", "fp", O1, "third", addr=4)
    other_build = Finding("fp-step", "fp", O3, "o3", addr=5)
    out = dedupe([a1, b, a2, a3, other_build])
    assert [(f.message, f.count) for f in out] == [("first", 6), ("other", 1), ("o3", 1)]
    assert dedupe([]) == []
