"""The progress display (harness/progress.py): one live status line on a terminal, rewritten in
place at most ~10 times a second and ended by a permanent line; plain lines elsewhere, bounded."""

from __future__ import annotations

import io
import logging
from types import SimpleNamespace

import pytest

from harness import progress
from harness.progress import StatusRenderer


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def shown():
    """Install a renderer on a stream of the test's choosing; uninstall it afterwards."""
    made = []

    def make(stream, **kw):
        r = StatusRenderer(stream, **kw)
        progress.log.addHandler(r)
        progress.log.setLevel(logging.DEBUG)
        progress.log.propagate = False
        made.append(r)
        return r

    yield make
    for r in made:
        progress.uninstall(r)


def test_live_mode_rewrites_one_line_rate_limited_and_ends_with_a_permanent_line(shown, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)  # the steps' start times
    tty = FakeTty()
    r = shown(tty, clock=clock, width=200)
    assert r.live  # chosen by isatty()
    st = progress.step("run", "fp-syscall: starting", total=100)
    for i in range(1, 101):
        clock.t += 0.01  # 100 updates a second
        st.update(f"fp-syscall: {i}/100 requests", i, 100)
    clock.t += 0.01
    st.end("fp-syscall: 100/100 requests, 99 stacks checked, 0 failed")
    out = tty.getvalue()
    states = [s for s in out.split("\r") if s]
    # One second at 100 updates/s: about ten redraws, not a hundred.
    redraws = [s for s in states if s.startswith("[run] fp-syscall:") and s.endswith("\x1b[K")]
    assert 8 <= len(redraws) <= 13, states
    assert "\n" not in "".join(redraws)  # the status line never moved down
    counts = [int(s.split(": ")[1].split("/")[0]) for s in redraws[1:]]
    assert counts == sorted(counts) and counts[-1] >= 90
    assert redraws[0] == "[run] fp-syscall: starting (0s)\x1b[K"
    assert out.endswith("\r[run] fp-syscall: 100/100 requests, 99 stacks checked, 0 failed\x1b[K\n")


def test_live_mode_prints_notes_and_ended_steps_above_the_status_line(shown, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    tty = FakeTty()
    shown(tty, clock=clock, width=200)
    outer = progress.step("images", "building kernel")
    inner = progress.step("images", "downloading linux-image")
    clock.t += 5
    progress.note("guest", "using TCG: no /dev/kvm")
    inner.end("downloaded linux-image in 5.0s")
    outer.end("built kernel in 5.0s")
    assert tty.getvalue() == (
        "\r[images] building kernel (0s)\x1b[K"
        "\r[guest] using TCG: no /dev/kvm\x1b[K\n"  # above the live line ...
        "\r[images] downloading linux-image (5s)\x1b[K"  # ... which comes back below it
        "\r[images] downloaded linux-image in 5.0s\x1b[K\n"
        "\r[images] building kernel (5s)\x1b[K"  # the outer step again
        "\r[images] built kernel in 5.0s\x1b[K\n")


def test_live_mode_ticks_the_elapsed_time_and_clears_its_line_on_close(shown, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    tty = FakeTty()
    r = shown(tty, clock=clock, width=40)
    progress.step("images", "building sid toolchain root (debootstrap sid) into the cache")
    clock.t += 3
    r.tick()
    lines = [s for s in tty.getvalue().split("\r") if s]
    assert len(lines) == 2 and all(len(s) <= 39 + len("\x1b[K") for s in lines)  # cut to the width
    assert lines[-1].endswith("...\x1b[K")
    r.close()
    assert tty.getvalue().endswith("\r\x1b[K")


def test_plain_mode_prints_start_end_and_a_bounded_number_of_count_lines(shown, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    out = io.StringIO()
    r = shown(out, clock=clock)
    assert not r.live
    st = progress.step("run", "fp-syscall: starting", total=1000)
    for i in range(1, 1001):
        clock.t += 0.05  # 50 s in all
        st.update(f"fp-syscall: {i}/1000 requests", i, 1000)
    st.end("fp-syscall: 1000/1000 requests in 50.0s")
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert lines[0] == "[run] fp-syscall: starting" and lines[-1] == "[run] fp-syscall: 1000/1000 requests in 50.0s"
    # one a tenth (the 5 s rule coincides here): never a line per update
    assert 10 <= len(lines) - 2 <= 12, lines


def test_plain_mode_a_quick_step_gets_its_start_and_end_line_only(shown, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    out = io.StringIO()
    shown(out, clock=clock)
    st = progress.step("run", "fp-syscall: starting", total=20)
    for i in range(1, 21):
        clock.t += 0.04
        st.update(f"fp-syscall: {i}/20 requests", i, 20)
    st.end("fp-syscall: 20/20 requests in 0.8s")
    assert out.getvalue().splitlines() == ["[run] fp-syscall: starting", "[run] fp-syscall: 20/20 requests in 0.8s"]


def test_plain_mode_slow_counts_give_a_line_every_5_s(shown, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    out = io.StringIO()
    shown(out, clock=clock)
    st = progress.step("run", "forkexec: starting", total=1_000_000)
    for i in range(1, 601):
        clock.t += 0.1  # 60 s, far from a tenth of the total
        st.update(f"forkexec: {i} requests", i, 1_000_000)
    st.end()
    lines = out.getvalue().splitlines()
    assert 11 <= len(lines) - 2 <= 13, lines
    assert lines[-1].startswith("[run] forkexec: 600 requests: done in 6")


def test_a_failing_block_fails_its_step(shown):
    out = io.StringIO()
    shown(out)
    with pytest.raises(RuntimeError), progress.step("guest", "booting default"):
        raise RuntimeError("QEMU died")
    assert out.getvalue().splitlines()[-1].startswith("[guest] booting default: failed after ")


def test_sampling_reporter_turns_engine_states_into_one_step(shown):
    out = io.StringIO()
    shown(out)
    report = progress.sampling_reporter()

    def state(sampled, finished=False):
        return SimpleNamespace(scenario="fp-syscall", sampled=sampled, samples=20, requests=sampled + 1,
                               stacks=sampled, failed=0, seconds=2.0, finished=finished)

    for k in range(21):
        report(state(k))
    report(state(20, finished=True))
    lines = out.getvalue().splitlines()
    assert lines[0] == "[run] fp-syscall: starting"
    assert lines[-1] == ("[run] fp-syscall: 20/20 requests on its tasks (21 in all), 20 stacks checked, "
                         "0 failed, in 2.0s")
    assert len(lines) <= 13


def test_sampling_reporter_says_when_sampling_was_interrupted(shown):
    out = io.StringIO()
    shown(out)
    report = progress.sampling_reporter()
    report(SimpleNamespace(scenario="fp-spin", sampled=0, samples=100, requests=0, stacks=0, failed=0, seconds=0.0,
                           finished=False))
    report(SimpleNamespace(scenario="fp-spin", sampled=7, samples=100, requests=9, stacks=7, failed=0, seconds=3.04,
                           finished=True, interrupted=True))
    assert out.getvalue().splitlines()[-1] == (
        "[run] fp-spin: 7/100 requests on its tasks (9 in all), 7 stacks checked, 0 failed: "
        "interrupted after 3.0s")


def test_without_a_renderer_nothing_is_written(capsys):
    with progress.step("images", "building nothing") as st:
        st.update("still nothing", 1, 2)
    progress.note("images", "a note")
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
