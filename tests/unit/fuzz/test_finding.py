"""harness/fuzz/finding.py: what a signature keeps of a finding's build."""

from __future__ import annotations

import pytest

from harness.fuzz.build import BuildConfig
from harness.fuzz.finding import Finding

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
