"""The toolchain roots and guest programs the SFrame tests build with: a root that is not built
is a skip locally and a failure in CI (:func:`tests.support.gating.require`)."""

from __future__ import annotations

import functools

from harness.images.errors import ImageError
from harness.images.programs import Program, Variant, build_program
from harness.images.toolchain import Toolchain, get_toolchain
from tests.support.gating import require

__all__ = ["need", "program", "toolchain"]


@functools.cache
def toolchain(name: str) -> Toolchain | ImageError:
    """The root ``name``, or the error that says why it is not there (./dev builds it)."""
    try:
        return get_toolchain(name)
    except ImageError as exc:
        return exc


def need(name: str) -> Toolchain:
    tc = toolchain(name)
    require(isinstance(tc, Toolchain), f"toolchain {name} unavailable: {tc}")
    return tc  # type: ignore[return-value]


@functools.cache
def program(name: str, tc_name: str, variant: Variant) -> Program:
    return build_program(name, need(tc_name), variant)
