"""The oracle registry of harness/oracles/base.py: ``register`` (one line per oracle, a name once)
and ``load_all`` (every module of the package imported: a new oracle is a new module).

Both run at import, before any test, so mutmut found them held by no test: each test here
registers into, or loads, an empty registry of its own and puts the real one back."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import harness.oracles
from harness.oracles import base
from harness.oracles.base import Oracle, load_all, register


@pytest.fixture
def registry(monkeypatch) -> dict:
    """An empty registry for the test; the real one back after it."""
    empty: dict = {}
    monkeypatch.setattr(base, "ORACLES", empty)
    return empty


def test_register_files_an_oracle_under_its_name_once(registry):
    class Probe(Oracle):
        name = "probe"

    assert register(Probe) is Probe and registry == {"probe": Probe}

    class Again(Oracle):
        name = "probe"

    with pytest.raises(ValueError, match="^oracle 'probe' registered twice$"):
        register(Again)
    assert registry == {"probe": Probe}


def test_load_all_imports_every_module_of_the_package(monkeypatch):
    """As for a first import: no oracle module loaded yet (each put back after the test)."""
    names = sorted(p.stem for p in Path(base.__file__).parent.glob("*.py") if p.stem not in ("__init__", "base"))
    assert names == ["cfi", "perf", "regs", "shadow"]
    load_all()  # each module in the real registry first: the rest of the suite finds them there
    registry: dict = {}
    monkeypatch.setattr(base, "ORACLES", registry)
    for n in names:
        monkeypatch.delitem(sys.modules, f"harness.oracles.{n}")
        monkeypatch.delattr(harness.oracles, n)
    load_all()
    assert {n: cls.__module__ for n, cls in registry.items()} == {n: f"harness.oracles.{n}" for n in names}
