"""The pytest plugin without a guest: options, the marker's parametrization and grouping, the
programs declared at collection, the guest pool's reuse, and the failure report (on a stack
record of a real broken-RA run of Debian's sha256sum, tests/data/broken_ra_stack.json)."""

from __future__ import annotations

import collections
import json
import os
from importlib.metadata import entry_points
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest

from harness import pytest_plugin
from harness.pytest_plugin import GuestPool, UnwindFailure, assert_unwinds
from harness.scenarios.catalog import Scenario
from harness.scenarios.result import Result
from tests.support.paths import TEST_DATA

pytest_plugins = ["pytester"]

RECORD = TEST_DATA / "broken_ra_stack.json"


def plugin_args() -> list[str]:
    """``-p harness.pytest_plugin`` unless the installed entry point loads it already."""
    installed = entry_points(group="pytest11", name="unwind_harness")
    if installed and not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return []
    # (this process imported it already: no assertion rewriting for it, and no warning about that)
    return ["-p", "harness.pytest_plugin", "-W", "ignore::pytest.PytestAssertRewriteWarning"]


def collected(pytester, *args) -> list[str]:
    res = pytester.runpytest_inprocess(*plugin_args(), "--collect-only", "-q", *args)
    return [line for line in res.outlines if "::" in line]


def test_marker_parametrizes_kernels_and_toolchains_grouped_by_kernel(pytester):
    pytester.makepyfile(test_a="""
        import pytest

        @pytest.mark.unwind(kernels=["default", "trixie"], toolchains=["host", "sid"])
        def test_src(unwind_run, unwind_toolchain):
            pass

        @pytest.mark.unwind(kernels=["trixie", "default"])
        def test_bin(unwind_run):
            pass

        def test_plain(unwind_run):
            pass

        def test_no_guest():
            pass
    """)
    ids = [i.split("::")[1] for i in collected(pytester)]
    # one block per kernel: its tests share a guest (toolchains are not grouped)
    kernels = [i.split("[")[1].rstrip("]").split("-")[0] for i in ids if "[" in i]
    assert kernels == sorted(kernels, key=kernels.index) and len(set(kernels)) == 2
    assert kernels.index("trixie") > kernels.index("default")
    assert sorted(ids) == sorted([
        "test_src[default-tc-host]", "test_src[default-tc-sid]", "test_src[trixie-tc-host]",
        "test_src[trixie-tc-sid]", "test_bin[trixie]", "test_bin[default]", "test_plain[default]", "test_no_guest"])


def test_kernel_option_and_ini(pytester):
    pytester.makepyfile(test_a="""
        def test_plain(unwind_kernel):
            pass
    """)
    assert collected(pytester, "--uh-kernel", "default,bookworm") == [
        "test_a.py::test_plain[default]", "test_a.py::test_plain[bookworm]"]
    pytester.makeini("[pytest]\nuh_kernel = trixie\nuh_samples = 7\n")
    assert collected(pytester) == ["test_a.py::test_plain[trixie]"]
    pytester.makepyfile(test_a="""
        def test_opts(unwind_kernel, unwind_toolchain, pytestconfig):
            from harness.pytest_plugin import _opt
            assert (unwind_kernel, unwind_toolchain) == ("trixie", "host")
            assert (_opt(pytestconfig, "samples"), _opt(pytestconfig, "smp"),
                    _opt(pytestconfig, "qemu")) == (7, 2, None)
    """)
    pytester.runpytest_inprocess(*plugin_args(), "--uh-smp", "2").assert_outcomes(passed=1)


def test_a_bad_ini_value_is_a_usage_error(pytester):
    pytester.makeini("[pytest]\nuh_qemu = newest\n")
    pytester.makepyfile(test_a="""
        def test_x(unwind_run):
            unwind_run("/usr/bin/true")
    """)
    res = pytester.runpytest_inprocess(*plugin_args())
    assert res.ret != 0 and "ini option uh_qemu = 'newest': not a valid value" in res.stdout.str() + res.stderr.str()


def test_marker_misuse_is_a_usage_error(pytester):
    pytester.makepyfile(test_a="""
        import pytest

        @pytest.mark.unwind(kernel="trixie")
        def test_x(unwind_run):
            pass
    """)
    res = pytester.runpytest_inprocess(*plugin_args())
    assert res.ret != 0
    res.stdout.fnmatch_lines(["*pytest.mark.unwind takes keywords kernels, toolchains, programs, sources*"])


def test_declared_programs_are_collected_per_toolchain(pytester):
    pytester.makepyfile(test_a="""
        import pytest
        from harness.images.programs import Variant

        @pytest.mark.unwind(toolchains=["host", "sid"], programs="/usr/bin/sha256sum",
                            sources=[("callchain", Variant(frame_pointers=False)), "threads"])
        def test_x(unwind_run, unwind_toolchain):
            pass

        @pytest.mark.unwind(programs=["/usr/bin/sha256sum", "/usr/bin/true"])
        def test_y(unwind_run):
            pass
    """)
    items, _ = pytester.inline_genitems(*plugin_args())
    declared = items[0].config.stash[pytest_plugin._declared_key]
    assert declared["programs"] == ["/usr/bin/sha256sum", "/usr/bin/true"]
    # only the selected tests' programs
    items, _ = pytester.inline_genitems(*plugin_args(), "-k", "test_y")
    assert items[0].config.stash[pytest_plugin._declared_key]["sources"] == []
    from harness.images.programs import Variant
    assert set(declared["sources"]) == {(n, tc, v) for n, v in (("callchain", Variant(frame_pointers=False)),
                                                                ("threads", Variant())) for tc in ("host", "sid")}


class FakeSession:
    started: ClassVar[list] = []

    def __init__(self, spec):
        self.spec = spec
        self.programs = {p: SimpleNamespace(path=Path(p).resolve()) for p in spec.user_programs}
        self.closed = False
        self.machine, self.accel, self.qemu = SimpleNamespace(release="7.3"), "tcg", None

    def start(self):
        FakeSession.started.append(self)
        return self

    def close(self):
        self.closed = True


def test_pool_boots_with_the_declared_programs_and_reuses_a_guest_that_has_them(monkeypatch):
    import harness.session

    monkeypatch.setattr(harness.session, "Session", FakeSession)
    FakeSession.started = []
    pool = GuestPool(1, {"programs": ["/usr/bin/sha256sum", "/nonexistent/prog"], "sources": []})
    a = pool.get("default", None, 1, ["/usr/bin/true"])
    assert a.spec.user_programs == ["/usr/bin/sha256sum", "/usr/bin/true"] and a.spec.kernel == "default"
    # a declared program that cannot go into a guest is left out of all of them, not fatal to each
    assert "no such file" in pool.unusable["/nonexistent/prog"]
    assert pool.get("default", None, 1, ["/usr/bin/sha256sum"]) is a  # declared: already there
    assert pool.get("default", None, 1) is a
    b = pool.get("trixie", None, 1, ["/usr/bin/true"])  # another kernel: the one live guest goes
    assert b is not a and a.closed and not b.closed and pool.boots == 2
    c = pool.get("trixie", None, 1, ["/usr/bin/env"])  # not declared, not in b: a boot of its own
    assert c is not b and b.closed and "/usr/bin/env" in c.spec.user_programs
    pool.discard(c)
    assert c.closed and pool.get("trixie", None, 1, ["/usr/bin/env"]) is not c
    assert pool.booted[0] == "default (7.3) on TCG, QEMU ?, 1 vCPU, 2 programs"
    pool.close()
    assert all(s.closed for s in FakeSession.started) and len(FakeSession.started) == 4


def _result(failures: int = 0, stacks: int = 5) -> Result:
    rec = json.loads(RECORD.read_text())
    r = Result(Scenario("user:sha256sum", program="sha256sum", toolchain="user"), oracles=["cfi", "regs"])
    r.stacks = stacks
    r.pairs = collections.Counter({("cfi", "failure"): failures, ("cfi", "explained"): stacks - failures,
                                   ("regs", "agree"): stacks})
    r.causes = collections.Counter({"fp-frameless-function": stacks - failures})
    r.failures = [rec] * failures
    r.failed_stacks = failures
    return r


def test_assert_unwinds_passes_and_fails_with_the_stacks_side_by_side():
    assert_unwinds(_result(0))
    with pytest.raises(UnwindFailure, match="fewer than 1"):
        assert_unwinds(_result(0, stacks=0))
    with pytest.raises(UnwindFailure) as exc:
        assert_unwinds(_result(4), show=2)
    text = str(exc.value)
    assert text.startswith("unwinding failed: 4 stacks with a divergence no cause proves")
    assert "oracles cfi, regs" in text and "causes: fp-frameless-function 1" in text
    # two records shown, frame by frame, the lost frames marked
    assert text.count("fp vs cfi") == 2 and "!! #6" in text and "__libc_start_main+0x85 (libc.so.6)" in text
    assert "[UNEXPLAINED] fp ends after 1 frames, cfi goes on: no cause proves it" in text
    assert "... and 2 more failing stacks" in text


def test_a_plain_assert_gets_the_stacks_as_a_report_section(pytester):
    """The fixture end to end with the engine and the pool replaced: log under tmp_path, the
    report section on a plain assert, no second copy under assert_unwinds."""
    pytester.makeconftest(f"""
        import collections, json
        import pytest
        import harness.scenarios.engine
        from harness.scenarios.result import Result

        REC = json.loads(open({str(RECORD)!r}).read())

        class FakeEngine:
            def __init__(self, session, scenario, log):
                self.sc, self.log = scenario, log

            def run(self):
                self.log.write(json.dumps(REC) + "\\n")
                r = Result(self.sc, oracles=["cfi", "regs"], stacks=1)
                if self.sc.seed == 99:
                    r.errors.append("GuestTimeout: the guest stopped answering")
                if self.sc.break_ra:
                    r.failures, r.failed_stacks = [REC], 1
                    r.pairs[("cfi", "failure")] = 1
                else:
                    r.pairs[("cfi", "agree")] = 1
                return r

        harness.scenarios.engine.Engine = FakeEngine

        class FakePool:
            discarded = []

            def get(self, *a):
                return object()

            def discard(self, sess):
                self.discarded.append(sess)

        @pytest.fixture(scope="session")
        def _unwind_pool():
            return FakePool()
    """)
    pytester.makepyfile(test_a="""
        from harness.pytest_plugin import assert_unwinds

        def test_ok(unwind_run, tmp_path):
            r = unwind_run("/usr/bin/sha256sum", ["/dev/zero"])
            assert_unwinds(r)
            assert unwind_run.logs == [tmp_path / "user_sha256sum.jsonl"] and unwind_run.logs[0].stat().st_size

        def test_plain(unwind_run):
            r = unwind_run("/usr/bin/sha256sum", ["/dev/zero"], break_ra=True)
            assert not r.failures

        def test_helper(unwind_run):
            assert_unwinds(unwind_run("/usr/bin/sha256sum", ["/dev/zero"], break_ra=True))

        def test_smp_and_errors(unwind_run, _unwind_pool, pytestconfig):
            r = unwind_run("/usr/bin/sha256sum", ["/dev/zero"], seed=99)
            # on two vCPUs timer requests (an NMI reaches vCPU 0 only); a guest that erred is dropped
            assert r.scenario.requests == ("timer",) and len(_unwind_pool.discarded) == 1
            assert unwind_run.source("callchain", requests=("nmi",)).scenario.requests == ("nmi",)
    """)
    res = pytester.runpytest_inprocess(*plugin_args(), "-p", "no:cacheprovider", "--uh-smp", "2")
    res.assert_outcomes(passed=2, failed=2)
    out = res.stdout.str()
    plain = out[out.index("_ test_plain[default] _"):out.index("_ test_helper[default] _")]
    # up to the short summary, which pytest does not cut to one line under CI=true
    helper = out[out.index("_ test_helper[default] _"):out.index("short test summary info")]
    assert "- unwind: failing stacks -" in plain and "!! #6" in plain and "log: " in plain
    assert "unwind: failing stacks" not in helper and "UnwindFailure: unwinding failed" in helper
    assert helper.count("[UNEXPLAINED]") == 1


def test_assert_unwinds_says_why_a_program_gave_no_stack_and_shows_its_output():
    r = _result(0, stacks=0)
    r.program_exit = 127
    r.program_output = "user:sha256sum.out"
    r.output_tail = ["/user/prog: error while loading shared libraries: libfoo.so.1: cannot open shared "
                     "object file: No such file or directory"]
    with pytest.raises(UnwindFailure) as exc:
        assert_unwinds(r)
    text = str(exc.value)
    assert ("0 stacks of the program checked, fewer than 1: the program exited with status 127 before its "
            "first checked stack") in text
    assert "the program's output ends (user:sha256sum.out):\n    /user/prog: error while loading" in text
def test_assert_unwinds_fails_on_a_cause_outside_the_declaration():
    """A guest program's run whose stacks proved a cause its facts say it cannot show (the engine
    counts it in Result.undeclared) fails, the cause named; a user's binary declares every cause."""
    from harness.scenarios.catalog import CATALOG

    r = _result(0)
    r.scenario = CATALOG["fp-spin"]
    r.declared = r.scenario.allowed_causes(r.oracles)
    assert "execve-replaced" not in r.declared
    r.causes["execve-replaced"] += 1
    r.undeclared["execve-replaced"] += 1
    with pytest.raises(UnwindFailure, match="causes outside the scenario's declaration: execve-replaced x1"):
        assert_unwinds(r)
    assert "execve-replaced" in _result(0).scenario.allowed_causes(["cfi", "regs"])  # user:sha256sum
