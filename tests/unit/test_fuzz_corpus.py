"""The fuzz targets (tests/fuzz/targets.py) in the unit suite, bounded: every input of the kept
corpus (tests/fuzz/corpus/TARGET/) replayed in this process, then a short coverage-guided run of
fresh inputs (atheris, in a child process: libFuzzer exits the process it runs in).

Only errors of the harness's tree (:class:`harness.errors.HarnessError`) may come out of a parser;
anything else fails the test with the input that raised it.  The long campaigns (a million inputs
and more per target) are run by hand: tests/fuzz/README.md.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import HarnessError
from tests.fuzz.targets import TARGETS
from tests.support.gating import require
from tests.support.paths import FUZZ, REPO
from tests.support.tiers import unit_share

# Fresh inputs per target in the bounded run: a few seconds each on a loaded 2-core machine.
FRESH = {"log_check": 1500, "log_mutations": 3000, "perf_check": 1000, "perf_resolve": 500, "perf_records": 3000, "sframe": 3000,
         "btf": 1000, "kallsyms": 3000, "rsp": 3000}


def corpus(name: str) -> list[Path]:
    return sorted((FUZZ / "corpus" / name).iterdir())


def test_every_target_has_a_corpus_and_a_bound():
    assert set(FRESH) == set(TARGETS)
    for name in TARGETS:
        assert len(corpus(name)) >= 5, name
    total = sum(p.stat().st_size for name in TARGETS for p in corpus(name))
    assert total < 4 << 20, f"the kept corpus is {total} bytes: minimise it (tests/fuzz/README.md)"


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_corpus_replays_with_typed_errors_only(name):
    typed = 0
    for path in corpus(name):
        data = path.read_bytes()
        try:
            TARGETS[name](data)
        except HarnessError:
            typed += 1
        except Exception as exc:  # the test's point: name the input that crashed the parser
            pytest.fail(f"{name}: {path.name} raised {type(exc).__name__}: {exc}")
    print(f"{name}: {len(corpus(name))} corpus inputs, {typed} typed errors")


# one target in the unit tier, every target in the deep tier (tests/support/tiers.py)
@pytest.mark.parametrize("name", unit_share(sorted(TARGETS), len(TARGETS)))
def test_fresh_inputs_coverage_guided(name, tmp_path):
    require(importlib.util.find_spec("atheris") is not None, "atheris is not installed (pip install -e .[test])")
    work = tmp_path / "corpus"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO)] + sys.path)}
    r = subprocess.run(
        [sys.executable, str(FUZZ / "fuzz.py"), name, f"-runs={FRESH[name]}", "-seed=1", "-max_len=8192",
         "-timeout=60", f"-artifact_prefix={tmp_path}/", str(work), str(FUZZ / "corpus" / name)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    crashes = sorted(tmp_path.glob("crash-*")) + sorted(tmp_path.glob("timeout-*"))
    tail = "\n".join(r.stderr.splitlines()[-40:])
    assert r.returncode == 0 and not crashes, f"{name}: rc {r.returncode}, {crashes}\n{tail}"
    done = [line for line in r.stderr.splitlines() if line.startswith("Done ")]
    assert done, tail
    print(f"{name}: {done[-1]}")
