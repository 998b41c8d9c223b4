"""Every cause either states its claims about binaries for cross-examination, or says why it makes
none (harness/verdicts/cross.py): a new cause with neither fails here, as one without accepting and
refusing cases fails test_causes.py."""

from __future__ import annotations

import pytest

from harness.verdicts.causes import CAUSES
from harness.verdicts.claims import CLAIMS, Claim
from harness.verdicts.cross import CLAIMS_OF, NO_CLAIMS, claims, no_claims


def test_every_cause_has_claims_or_a_reason_for_none():
    missing = sorted(set(CAUSES) - set(CLAIMS_OF) - set(NO_CLAIMS))
    assert not missing, f"causes with neither claims nor a reason for none: {missing}"
    assert not set(CLAIMS_OF) & set(NO_CLAIMS)
    assert all(len(reason) > 40 for reason in NO_CLAIMS.values())


def test_a_cause_registered_twice_or_unknown_is_refused():
    name = next(iter(CLAIMS_OF))
    with pytest.raises(ValueError, match="registered twice"):
        claims(name)(lambda stack, d: [])
    with pytest.raises(ValueError, match="registered twice"):
        no_claims("a reason long enough to say something about it", name)
    with pytest.raises(ValueError, match="no registered cause"):
        claims("no-such-cause")(lambda stack, d: [])
    with pytest.raises(ValueError, match="no registered cause"):
        no_claims("a reason", "no-such-cause")


def test_every_claim_a_witness_can_check():
    from harness.toolchain.witness import CrossExaminer

    for fact in CLAIMS:
        assert callable(getattr(CrossExaminer, "_" + fact.replace("-", "_"), None)), fact
    with pytest.raises(ValueError, match="unknown claim"):
        Claim("no-such-fact", "m", "m")
