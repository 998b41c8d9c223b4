"""The catalog's scenarios: the unwinder is a checked choice, derived from a build by one rule."""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from harness.errors import HarnessError
from harness.images.programs import USER, Variant
from harness.scenarios.catalog import CATALOG, DEFAULT_SAMPLES, Scenario, on_vcpus, unwinder_for, user_scenario
from harness.unwind.user import UnknownUnwinder, Unwinder


def test_a_scenario_takes_an_unwinder_name_and_keeps_the_member():
    sc = Scenario("x", unwinder="sframe")
    assert sc.unwinder is Unwinder.SFRAME and sc.unwinder == "sframe" and f"{sc.unwinder}" == "sframe"
    assert Scenario("y").unwinder is Unwinder.FP and Scenario("y").samples == DEFAULT_SAMPLES
    assert all(isinstance(s.unwinder, Unwinder) for s in CATALOG.values())


@pytest.mark.parametrize("bad", ["dwarf", "SFrame", "", "cfi"])
def test_an_unknown_unwinder_is_a_typed_error_naming_it_and_the_known_ones(bad):
    with pytest.raises(UnknownUnwinder) as err:
        Scenario("bad-one", unwinder=bad)
    text = str(err.value)
    assert f"scenario bad-one: unknown unwinder {bad!r}; known: fp, sframe" == text
    assert isinstance(err.value, HarnessError) and err.value.exit_code == 2
    # a replaced field is checked again
    with pytest.raises(UnknownUnwinder):
        dataclasses.replace(CATALOG["fp-spin"], unwinder=bad)


@pytest.mark.parametrize("variant, toolchain, want", [
    (Variant(), "host", Unwinder.FP),  # frame pointers and SFrame: the FP walk is what it tests
    (Variant(frame_pointers=False), "sid", Unwinder.SFRAME),
    (Variant(frame_pointers=False, sframe=False), "host", Unwinder.FP),
    (Variant(bits=32, frame_pointers=False), "host", Unwinder.FP),  # no SFrame for i386
    (Variant(sframe=True), USER, Unwinder.SFRAME),  # a user's binary: frame pointers unknown
    (Variant(sframe=False), USER, Unwinder.FP),
])
def test_the_unwinder_derived_from_a_build(variant, toolchain, want):
    assert unwinder_for(variant, toolchain) is want


def test_the_catalog_agrees_with_the_rule_where_it_does_not_choose_otherwise():
    # every no-frame-pointer SFrame build in the catalog walks SFrame, every build without SFrame FP
    for sc in CATALOG.values():
        if not sc.variant.sframe or (sc.variant.sframe and not sc.variant.frame_pointers):
            assert sc.unwinder is unwinder_for(sc.variant, sc.toolchain), sc.name


def test_a_user_binary_without_sframe_walks_frame_pointers():
    path = shutil.which("sha256sum")
    sc = user_scenario(path, ["/dev/zero"])
    assert sc.toolchain == USER and sc.samples == DEFAULT_SAMPLES
    assert sc.unwinder is unwinder_for(sc.variant, USER)
    assert sc.unwinder is (Unwinder.SFRAME if sc.variant.sframe else Unwinder.FP)


def test_on_more_than_one_vcpu_nmi_requests_become_timer_interrupts():
    """QMP's NMI reaches vCPU 0 only: every catalog scenario and a user's binary sample with timer
    interrupts on 2 vCPUs, keep their other requests, and are left as they are on one."""
    for sc in CATALOG.values():
        assert on_vcpus(sc, 1) is sc
        two = on_vcpus(sc, 2)
        assert "nmi" not in two.requests and two.requests, sc.name
        assert set(two.requests) == (set(sc.requests) - {"nmi"}) | ({"timer"} if "nmi" in sc.requests else set())
        if "nmi" not in sc.requests:
            assert two is sc
    assert any("nmi" in sc.requests for sc in CATALOG.values())
    assert user_scenario(shutil.which("sha256sum"), [], smp=2).requests == ("timer",)
    assert user_scenario(shutil.which("sha256sum"), []).requests == ("nmi",)
