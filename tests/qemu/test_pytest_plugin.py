"""The pytest plugin on real guests, driven by pytester: the README's examples, verbatim, as a
user's test files, one that passes and one that fails on purpose (``break_ra``: every RA read
at the wrong offset), whose output must show the failing stacks side by side.  Three guest
boots in all: the first run boots one, the second one per kernel."""

from __future__ import annotations

import os
import re
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from harness.images.cache import cache_root

pytestmark = pytest.mark.qemu
pytest_plugins = ["pytester"]

PAGE = Path(__file__).resolve().parents[2] / "docs" / "pytest-plugin.md"  # the plugin's page: its examples
# Taken before pytester points HOME at its tmp dir: the runs below use the images already built.
CACHE = str(cache_root())

FAILING = '''

def test_broken_unwinder_is_caught(unwind_run):
    # test-only switch: the unwinder reads every return address at the wrong offset
    result = unwind_run("/usr/bin/sha256sum", ["/dev/zero"], break_ra=True)
    assert_unwinds(result)


def test_broken_unwinder_plain_assert(unwind_run):
    result = unwind_run("/usr/bin/sha256sum", ["/dev/zero"], break_ra=True)
    assert not result.failures
'''


def readme_examples() -> list[str]:
    """The page's Python examples, in order: the user's binary, then the guest programs."""
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.DOTALL)


def plugin_args() -> list[str]:
    """``-p harness.pytest_plugin`` unless the installed entry point loads it already."""
    installed = entry_points(group="pytest11", name="unwind_harness")
    if installed and not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return []
    return ["-p", "harness.pytest_plugin"]


def run(pytester, monkeypatch, *args):
    # pytester sets HOME to its tmp dir: without this, the runs would fetch and build every image
    # again into an empty cache there (minutes, and gigabytes)
    monkeypatch.setenv("HARNESS_CACHE", CACHE)
    # (pytester prints the run's output: it is in this test's captured stdout)
    return pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider", "-v", *args, timeout=900)


def test_readme_example_passes_and_a_broken_unwinder_fails_side_by_side(pytester, monkeypatch):
    example = readme_examples()[0]
    pytester.makepyfile(test_unwind=example + FAILING)
    res = run(pytester, monkeypatch, "--uh-samples", "20", "-rP")
    res.assert_outcomes(passed=1, failed=2)
    out = res.stdout.str()
    # the passing run's summary, with -rP: every stack agreed or was explained by a cause
    passed = out[out.index("_ test_sha256sum_unwinds[default] _"):]
    assert re.search(r"- unwind: runs -+\nuser:sha256sum: \d+ stacks of the program checked \(\d+ delivered\), "
                     r"0 failing; unwinder fp; oracles cfi, regs", passed), passed[:2000]
    res.stdout.fnmatch_lines(["*test_sha256sum_unwinds[[]default[]] PASSED*",
                              "*unwind-harness: 1 guest booted*", "default (*) on *, 1 vCPU, 1 programs"])
    helper = out[out.index("_ test_broken_unwinder_is_caught[default] _"):
                 out.index("_ test_broken_unwinder_plain_assert[default] _")]
    plain = out[out.index("_ test_broken_unwinder_plain_assert[default] _"):]
    # assert_unwinds: the summary, then the stacks side by side, the lost frames marked !!
    assert re.search(r"UnwindFailure: unwinding failed: \d+ stacks with a divergence no cause proves", helper)
    for text in (helper, plain):
        assert "user:sha256sum pid " in text and ": fp vs cfi" in text
        assert re.search(r"!! #1 +\S", text), "no lost frame shown"
        assert "[UNEXPLAINED]" in text and "fp stopped: " in text and "cfi stopped: " in text
    assert "def assert_unwinds" not in helper  # the helper's own frame is hidden
    # a plain assert gets them in a report section, with the log under the test's tmp_path
    assert "- unwind: failing stacks -" in plain and "unwind: failing stacks" not in helper
    log = re.search(r"log: (\S+user_sha256sum\.jsonl)", plain).group(1)
    assert Path(log).is_file() and '"ev":"end"' in Path(log).read_text().splitlines()[-1]


def test_readme_example_over_kernels_and_toolchains(pytester, monkeypatch):
    example = readme_examples()[1]
    pytester.makepyfile(test_sframe=example)
    res = run(pytester, monkeypatch, "--uh-samples", "10")
    res.assert_outcomes(passed=4)
    # grouped per kernel: one guest each, carrying both toolchains' builds
    res.stdout.fnmatch_lines(["*unwind-harness: 2 guests booted*", "default (7.*) on *, 2 programs",
                              "trixie (6.12.*) on *, 2 programs"])
