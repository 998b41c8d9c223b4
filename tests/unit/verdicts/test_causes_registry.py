"""The registry of harness/verdicts/causes.py itself, apart from any one cause's predicate: what
``cause()`` and ``named()`` record, which divergences a cause may be asked about (``applies``),
which runs may show it (``possible``), and which of the oracle's frames :func:`explain` hands to
the causes at all.

mutmut found these rules held by no test (issue 21): the registrations run at import, so a
test must register its own cause to see what ``cause()`` records.  Each test here registers into
a copy of the registry (the ``registry`` fixture) and puts the real one back."""

from __future__ import annotations

import pytest

from harness.memory import BufferMemory
from harness.oracles.base import Stack, load_all
from harness.regs import UserRegs
from harness.unwind.maps import AddressSpace, Mapping
from harness.unwind.user import Trace
from harness.verdicts.causes import CAUSES, FACTS, NAMED, allowed_causes, cause, explain, named
from harness.verdicts.types import DIFFERS, ENDS, LOST, Divergence

TEXT = Mapping(0x400000, 0x500000, "r-xp", 0, path="/usr/bin/probe")
A, B, C, D = 0x401000, 0x402000, 0x403000, 0x404000  # in TEXT
NOWHERE = 0x9000000  # in no mapping


@pytest.fixture
def registry():
    """The registries emptied for the test, and put back as they were after it."""
    saved_causes, saved_named = dict(CAUSES), dict(NAMED)
    CAUSES.clear()
    NAMED.clear()
    yield
    CAUSES.clear()
    CAUSES.update(saved_causes)
    NAMED.clear()
    NAMED.update(saved_named)


def _accept_all(stack, d):
    return {"text": "accepted", "at": d.want_index}


def _stack(space=None) -> Stack:
    return Stack(UserRegs(ip=A, sp=0x7FF000, bp=0x7FF010), Trace([]), "fp", 510, BufferMemory({}),
                 AddressSpace([TEXT]) if space is None else space, None)


def test_cause_records_what_its_line_says(registry):
    cause("probe", (LOST, ENDS), "a probe", oracles={"cfi"}, unwinders={"fp"},
          needs=("execs", {"signals", "deep"}))(_accept_all)
    c = CAUSES["probe"]
    assert (c.name, c.kinds, c.summary, c.predicate) == ("probe", frozenset({LOST, ENDS}), "a probe", _accept_all)
    assert (c.oracles, c.unwinders) == (frozenset({"cfi"}), frozenset({"fp"}))
    # a fact named alone is one the run must have; a set, facts of which it must have one
    assert c.needs == (frozenset({"execs"}), frozenset({"signals", "deep"}))
    cause("anywhere", (LOST,), "any oracle, any unwinder")(_accept_all)
    assert (CAUSES["anywhere"].oracles, CAUSES["anywhere"].unwinders, CAUSES["anywhere"].needs) == (None, None, ())


def test_named_declares_a_difference_no_predicate_here_proves(registry):
    assert named("probe-named", "proven elsewhere", oracles={"perf"}, needs=("defer",)) == "probe-named"
    n = NAMED["probe-named"]
    assert (n.name, n.kinds, n.summary, n.oracles, n.unwinders) == (
        "probe-named", frozenset(), "proven elsewhere", frozenset({"perf"}), None)
    assert n.needs == (frozenset({"defer"}),)
    assert n.predicate(_stack(), None) is None
    assert "probe-named" not in CAUSES


@pytest.mark.parametrize("first, second", [("cause", "cause"), ("cause", "named"), ("named", "cause"),
                                           ("named", "named")])
def test_a_name_is_registered_once_across_both_registries(registry, first, second):
    def register(how):
        if how == "cause":
            cause("twice", (LOST,), "once")(_accept_all)
        else:
            named("twice", "once", oracles={"perf"})

    register(first)
    with pytest.raises(ValueError, match="cause 'twice' registered twice"):
        register(second)
    cause("other", (LOST,), "another name")(_accept_all)  # a new name is still taken
    named("other-named", "another name", oracles={"perf"})


def test_an_unknown_fact_is_refused_with_the_known_ones_listed(registry):
    known = ", ".join(FACTS)
    with pytest.raises(ValueError) as raised:
        cause("probe", (LOST,), "a probe", needs=("forks-twice",))
    assert str(raised.value) == f"unknown facts ['forks-twice']; known: {known}"
    with pytest.raises(ValueError) as raised:
        allowed_causes(frozenset({"forks-twice"}), ("regs",), "fp")
    assert str(raised.value) == f"unknown facts ['forks-twice']; known: {known}"


def test_a_generic_cause_is_not_for_an_oracle_that_runs_the_kernels_walk(registry):
    """perf's oracle is the kernel's own FP walk: a cause registered for any oracle (why an
    unwinder misses the truth) says nothing about it.  An oracle the registry does not know takes
    them, as explain() does."""
    load_all()
    cause("generic", (LOST,), "any oracle")(_accept_all)
    cause("perf-only", (LOST,), "perf's", oracles={"perf"})(_accept_all)
    g = CAUSES["generic"]
    assert not g.applies(Divergence("fp", "perf", LOST, 1, 1, (A,), (A, B)))
    assert g.applies(Divergence("fp", "cfi", LOST, 1, 1, (A,), (A, B)))
    assert g.applies(Divergence("fp", "not-an-oracle", LOST, 1, 1, (A,), (A, B)))
    assert not g.applies(Divergence("fp", "cfi", ENDS, 1, 1, (A,), (A, B)))  # and only for its kinds
    assert CAUSES["perf-only"].applies(Divergence("fp", "perf", LOST, 1, 1, (A,), (A, B)))
    assert allowed_causes(None, ("perf",), "fp") == {"perf-only"}
    assert allowed_causes(None, ("perf", "cfi"), "fp") == {"perf-only", "generic"}
    assert allowed_causes(None, ("not-an-oracle",), "fp") == {"generic"}


def test_explain_hands_a_lost_frame_to_the_causes_only_where_the_task_has_it(registry):
    """LOST covers the one frame lost: that frame must be in a mapping, the oracle's frames after
    it are no business of this divergence."""
    cause("probe", (LOST, ENDS, DIFFERS), "accepts all", oracles={"cfi"})(_accept_all)
    s = _stack()
    assert explain(s, Divergence("fp", "cfi", LOST, 1, 1, (A, C), (A, B, C))).cause == "probe"
    assert explain(s, Divergence("fp", "cfi", LOST, 1, 1, (A, C), (A, NOWHERE, C))).cause is None
    assert explain(s, Divergence("fp", "cfi", LOST, 1, 1, (A, C), (A, 0, C))).cause is None
    # a frame past the lost one outside the task: the lost frame is still the causes' to prove
    assert explain(s, Divergence("fp", "cfi", LOST, 1, 1, (A,), (A, B, NOWHERE))).cause == "probe"
    # ENDS covers the oracle's whole rest
    assert explain(s, Divergence("fp", "cfi", ENDS, 1, 1, (A,), (A, B, C))).cause == "probe"
    assert explain(s, Divergence("fp", "cfi", ENDS, 1, 1, (A,), (A, B, NOWHERE))).cause is None


def test_explain_hands_a_differs_to_the_causes_unless_the_oracle_goes_on_to_0(registry):
    """The divergent frame of a DIFFERS is the one a cause about the oracle's walk looks at, even
    outside the task (cfi-no-fde); the oracle's frames from it on must not be 0 (a 0 there is a
    walk that failed, the Go shape's frame past runtime.goexit: no cause's to prove)."""
    cause("probe", (DIFFERS,), "accepts all", oracles={"cfi"})(_accept_all)
    s = _stack()
    assert explain(s, Divergence("fp", "cfi", DIFFERS, 1, 1, (A, D), (A, NOWHERE, C))).cause == "probe"
    assert explain(s, Divergence("fp", "cfi", DIFFERS, 1, 1, (A, D), (A, B, 0))).cause is None
    assert explain(s, Divergence("fp", "cfi", DIFFERS, 1, 1, (A, D), (A, 0))).cause is None
    assert explain(s, Divergence("fp", "cfi", DIFFERS, 1, 1, (A, D), (A, B, C, 0))).cause is None
    assert explain(s, Divergence("fp", "cfi", DIFFERS, 1, 1, (A, D), (A, B, C, D))).cause == "probe"


def test_a_stack_without_an_address_space_leaves_every_nonzero_frame_to_the_causes(registry):
    cause("probe", (LOST,), "accepts all", oracles={"cfi"})(_accept_all)
    s = _stack(space=object())  # no mapping_at: nothing to say about where the frame is
    assert explain(s, Divergence("fp", "cfi", LOST, 1, 1, (A, C), (A, NOWHERE, C))).cause == "probe"
    assert explain(s, Divergence("fp", "cfi", LOST, 1, 1, (A, C), (A, 0, C))).cause is None


def test_the_perf_oracles_frames_go_to_its_causes_wherever_they_are(registry):
    """perf's frames past a check the unwinder makes are garbage by design: its own causes say so."""
    load_all()
    cause("probe", (LOST,), "accepts all", oracles={"perf"})(_accept_all)
    assert explain(_stack(), Divergence("fp", "perf", LOST, 1, 1, (A, C), (A, NOWHERE, C))).cause == "probe"

