"""``--samples`` has an upper bound (issue 34), and it is the kernel's: a scenario's request budget
(harness/scenarios/engine.py request_budget) must fit in the cookies one CPU's counter gives
before they repeat (harness/deferred/profile.py COOKIES_PER_CPU), else a task's entries share a
cookie and the checker reports it."""

from __future__ import annotations

import io

import pytest

from harness.cli import main
from harness.deferred import IRQ, Context, DeferredModel, EventLog, UnwindWork, check_lines, mainline
from harness.deferred.profile import COOKIES_PER_CPU, cookie_fields
from harness.scenarios.engine import MAX_REQUESTS_PER_SAMPLE, MAX_SAMPLES, request_budget

TOO_MANY = f"is more than {MAX_SAMPLES:,}, the most a run can ask for"


def test_the_bound_is_the_cookie_counter_s():
    assert MAX_SAMPLES == 214_748_354
    assert request_budget(MAX_SAMPLES) <= COOKIES_PER_CPU < request_budget(MAX_SAMPLES + 1)
    assert request_budget(1) == MAX_REQUESTS_PER_SAMPLE + 100


def test_a_cpu_s_cookies_repeat_after_2_31_and_the_checker_sees_it():
    """mainline's cnt = (ctr + 2) | 1 in a u32 runs through the odd values: 3, 5, ..., 2^32 - 1,
    1, 3: the (2^31 + 1)-th cookie of a CPU is its first.  The model does what the kernel does;
    a task that got the first in one entry and the wrapped one in another is reported by the
    checker, which is why no run may make more requests than that."""
    fp = io.StringIO()
    model = DeferredModel(mainline(), lambda t: [0x401000], log=EventLog(fp))
    work = UnwindWork(lambda *a: None, "t")
    model.init(work)
    t = model.spawn(cpu=0)
    model.enter_kernel(t, cpu=0)
    _, first = model.request(work, t, 0, Context(IRQ))
    model.return_to_user(t)
    assert cookie_fields(first) == (1, 3)  # cpu 0 + 1, the counter's first value
    # 2^31 - 1 cookies later on that CPU the counter holds the last odd value before the wrap: 1
    # (2^32 - 1 first, then (2^32 - 1 + 2) mod 2^32 | 1)
    assert (((0xFFFFFFFF + 2) & 0xFFFFFFFF) | 1) == 1 and COOKIES_PER_CPU == (1 << 32) // 2
    model.percpu_ctr[0] = 1
    model.enter_kernel(t, cpu=0)
    _, again = model.request(work, t, 0, Context(IRQ))
    model.return_to_user(t)
    assert again == first
    v = check_lines(fp.getvalue().splitlines())
    assert any("was already used by an earlier entry of this task" in m for m in v.messages()), v.messages()


@pytest.mark.parametrize("argv", [
    ["run", "fp-spin", "--samples"],
    ["run", "--program", "/bin/true", "--samples"],
    ["bench", "deferred", "--samples"],
    ["bench", "soak", "--requests"],
    ["fuzz", "live", "--samples"],
])
@pytest.mark.parametrize("n", [MAX_SAMPLES + 1, 10 ** 12, 2 ** 64])
def test_a_count_over_the_bound_is_exit_2_naming_it(argv, n, capsys, monkeypatch):
    def no_boot(*a, **k):
        raise AssertionError("a guest was booted for a refused --samples")

    monkeypatch.setattr("harness.session.Session", no_boot)
    with pytest.raises(SystemExit) as e:  # argparse's own exit, as for any bad option value
        main([*argv, str(n)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{n} {TOO_MANY}" in err, err
    assert "2^31 cookies a CPU's counter gives" in err


def test_the_bound_itself_parses():
    from harness.commands import sample_count

    assert sample_count(str(MAX_SAMPLES)) == MAX_SAMPLES
