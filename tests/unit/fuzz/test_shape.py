"""The shape strategies: every draw is a valid shape, every feature and frame kind is reachable,
and shapes round-trip through the reproducers' JSON."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings

from harness.fuzz.shape import FEATURES, FRAMES, MAX_FUNCS, Func, Shape, ShapeError, shapes, validate

SETTINGS = settings(database=None, deadline=None, suppress_health_check=list(HealthCheck), max_examples=100)
# find() without its shrink (the first draw that has it) and the same draws every run
REACH = settings(database=None, deadline=None, suppress_health_check=list(HealthCheck), max_examples=2000,
                 phases=(Phase.generate,), derandomize=True)


@SETTINGS
@given(shapes())
def test_every_drawn_shape_is_valid_and_round_trips(shape):
    validate(shape)  # raises on a broken rule
    assert 1 <= len(shape.funcs) <= MAX_FUNCS
    assert Shape.from_json(shape.to_json()) == shape
    assert shape.lang == ("c++" if "exception" in shape.features() else "c")


@pytest.mark.parametrize("feature", FEATURES)
def test_every_feature_is_reachable(feature):
    assert feature in find(shapes(), lambda s: feature in s.features(), settings=REACH).features()


@pytest.mark.parametrize("frame", FRAMES)
def test_every_frame_kind_is_reachable(frame):
    assert frame in find(shapes(), lambda s: frame in s.frames(), settings=REACH).frames()


def test_calls_fan_out_and_chain():
    deep = find(shapes(), lambda s: len(s.funcs) == MAX_FUNCS and any(len(f.callees) >= 2 for f in s.funcs),
                settings=REACH)
    assert len(deep.funcs) == MAX_FUNCS


@pytest.mark.parametrize("funcs, why", [
    ((), "1 to"),
    ((Func(callees=(0,)),), "later functions"),
    ((Func(), Func()), "called by none"),
    ((Func(callees=(1,), features=frozenset({"redzone"})), Func()), "red-zone"),
    ((Func(features=frozenset({"tailcall"})),), "tail call"),
    ((Func(callees=(1,), features=frozenset({"vdso"})), Func()), "vDSO function is a leaf"),
    ((Func(features=frozenset({"vdso", "redzone"})),), "no red zone"),
    ((Func(features=frozenset({"signal", "thread"}), callees=(1,)), Func()), "at most one"),
    ((Func(frame="odd"),), "frame"),
    ((Func(features=frozenset({"bogus"})),), "unknown features"),
])
def test_invalid_shapes_are_refused_with_the_rule_named(funcs, why):
    with pytest.raises(ShapeError, match=why):
        Shape(tuple(funcs))
