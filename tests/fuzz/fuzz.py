"""Coverage-guided fuzzing of the harness's parsers with atheris (libFuzzer for Python).

    PYTHONPATH=. python tests/fuzz/fuzz.py TARGET [libFuzzer options] [CORPUS_DIR ...]
    PYTHONPATH=. python tests/fuzz/fuzz.py TARGET -runs=1000000 /tmp/work-TARGET tests/fuzz/corpus/TARGET

TARGET is a name of :data:`targets.TARGETS`.  The harness modules the target runs are
instrumented for coverage (``atheris.instrument_imports`` around :func:`targets.prepare`); an
input may make the parser return or raise a :class:`harness.errors.HarnessError`, anything else
is a crash: libFuzzer writes the input to ``crash-*`` and stops, and the driver prints
``fuzz TARGET: N inputs, M typed errors, S s``.  The count of inputs of a whole run is libFuzzer's
``Done N runs`` line (``-print_final_stats=1`` adds ``stat::number_of_executed_units``; an
interrupted run prints it too).

The first corpus directory is where libFuzzer adds the inputs that find new coverage; give it a
scratch directory and minimise into ``tests/fuzz/corpus/TARGET`` with ``-merge=1`` (README).
"""

from __future__ import annotations

import atexit
import os
import shlex
import sys
import tempfile
import time

import atheris

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import targets  # noqa: E402

from harness.errors import HarnessError  # noqa: E402

COUNTS = {"inputs": 0, "typed": 0}
START = time.monotonic()


def _self_command(name: str) -> str:
    """An executable that re-runs this target: libFuzzer starts ``argv[0]`` again for -merge=1
    (and -fork, -jobs), which must be this interpreter, this script and the target's name.  One
    file per target and user in the temporary directory, rewritten (atomically) by every run."""
    path = os.path.join(tempfile.gettempdir(), f"harness-fuzz-{os.getuid()}-{name}.sh")
    fd, tmp = tempfile.mkstemp(prefix=f"harness-fuzz-{name}-", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(os.path.abspath(__file__))} "
                f"{shlex.quote(name)} \"$@\"\n")
    os.chmod(tmp, 0o700)
    os.replace(tmp, path)
    return path


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in targets.TARGETS:
        sys.exit(f"usage: fuzz.py TARGET [libFuzzer options] [CORPUS...]; TARGET one of {', '.join(targets.TARGETS)}")
    name = sys.argv[1]
    fn = targets.TARGETS[name]
    with atheris.instrument_imports(include=["harness"]):
        targets.prepare(name)  # the target's modules, instrumented for coverage

    def one(data: bytes) -> None:
        COUNTS["inputs"] += 1
        try:
            fn(data)
        except HarnessError:
            COUNTS["typed"] += 1

    @atexit.register
    def _report() -> None:
        print(f"fuzz {name}: {COUNTS['inputs']} inputs, {COUNTS['typed']} typed errors, "
              f"{time.monotonic() - START:.0f} s", file=sys.stderr, flush=True)

    sys.setrecursionlimit(3000)
    atheris.Setup([_self_command(name)] + sys.argv[2:], one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
