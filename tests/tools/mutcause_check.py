"""Check by hand that given mutmut mutants are killed by given tests, without a ``mutmut run``.

``mutmut run`` starts with a stats run of the whole test selection (a quarter of an hour on a
loaded machine) before it runs one mutant; to check that a new test kills the mutants it was
written for, this script only (re)generates mutmut's ``mutants/`` tree (``--generate``: mutmut's
own copy and mutation steps, no tests run), copies the worktree's current tests into it, and
runs pytest there once per mutant with ``MUTANT_UNDER_TEST`` set (the way mutmut runs one), first
once with no mutant (the tests must pass on the original code)::

    nice -n 19 .venv/bin/python tests/tools/mutcause_check.py [--generate] \\
        -t tests/unit/verdicts/test_causes.py -k "own-restorer" \\
        harness.verdicts.causes.x__signal_frame__mutmut_10 x__signal_frame__mutmut_13 ...

A name without a dot is taken as one of harness.verdicts.causes.  Run from the repository root
(the worktree); it prints one line per mutant (killed / SURVIVED, seconds) and exits 1 if any
survived.  ``mutmut show NAME`` prints a mutant's diff once the tree is generated.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

MODULE = "harness.verdicts.causes"


def generate() -> None:
    """mutmut's mutants/ tree (mutmut 3: copy the sources and also_copy, mutate the selection)."""
    from mutmut.__main__ import create_mutants
    from mutmut.mutation.trampoline import set_mutant_under_test
    from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir

    set_mutant_under_test("mutant_generation")
    os.makedirs("mutants", exist_ok=True)
    copy_src_dir()
    copy_also_copy_files()
    print(create_mutants(2), flush=True)


def refresh_tests() -> None:
    """The worktree's tests/ (the tests being written, their data) over mutants/tests."""
    shutil.copytree("tests", "mutants/tests", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))


def run(mutant: str, tests: list[str], k: str | None) -> tuple[bool, float]:
    cmd = [sys.executable, "-m", "pytest", "-m", "not qemu", "-q", "-x", "-p", "no:cacheprovider", *tests]
    if k:
        cmd += ["-k", k]
    env = {**os.environ, "MUTANT_UNDER_TEST": mutant}
    t = time.monotonic()
    r = subprocess.run(cmd, cwd="mutants", env=env, capture_output=True, text=True)
    return r.returncode == 0, time.monotonic() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mutants", nargs="+")
    ap.add_argument("-t", "--test", action="append", required=True, help="a test file or node id (repeatable)")
    ap.add_argument("-k", help="pytest -k expression")
    ap.add_argument("--generate", action="store_true", help="(re)generate mutants/ first")
    a = ap.parse_args()
    if a.generate or not Path("mutants").is_dir():
        generate()
    refresh_tests()
    ok, secs = run("", a.test, a.k)
    if not ok:
        print(f"the tests fail on the original code ({secs:.0f} s): nothing to check")
        return 2
    survived = 0
    for m in a.mutants:
        name = m if "." in m else f"{MODULE}.{m}"
        passed, secs = run(name, a.test, a.k)
        survived += passed
        print(f"{name}: {'SURVIVED' if passed else 'killed'} ({secs:.0f} s)", flush=True)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
