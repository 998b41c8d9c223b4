"""The lockstep of harness kernel-diff without a guest: event matching and comparison.

Two kinds of input: event files recorded from the real 7.3 kernel (``tests/data/kernel-diff/``,
written by ``harness kernel-diff``: perf with defer_callchain sampling catalog programs), replayed
through a fresh lockstep, mutated to prove that each compared item can fail; and short event
sequences written by hand for the cases a recording may not contain.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from harness.deferred.profile import mainline, seed_v10
from harness.lockstep.compare import (
    EXPECTED,
    CallMatcher,
    Event,
    Lockstep,
    LockstepError,
    deferred_support,
    renumber,
    replay,
)
from tests.support.gating import require
from tests.support.paths import TEST_DATA

DATA = TEST_DATA / "kernel-diff"
RECORDINGS = sorted(DATA.glob("*.events.jsonl"))
WORK = 0xFFFFFFFF83D9EA80  # perf_unwind_work in the recorded 7.3 kernel
TRACERS = {WORK: "perf"}
TASK = 0xFFFF888004000000


def load(path: Path) -> tuple[dict, list[Event]]:
    header, events = {}, []
    for line in path.read_text().splitlines():
        d = json.loads(line)
        if "header" in d:
            header = d
        else:
            events.append(Event.from_dict(d))
    return header, events


def run(path: Path, profile=None, mutate=None):
    header, events = load(path)
    if mutate is not None:
        events = mutate(events)
    tracers = {int(k): v for k, v in header["tracers"].items()}
    ctr = {int(k): v for k, v in header["percpu_ctr"].items()}
    return replay(events, profile or mainline(), tracers, ctr)


# -- recorded events ------------------------------------------------------------------------------


def test_recordings_are_there():
    assert len(RECORDINGS) >= 2, "recorded kernel-diff event files are missing"
    smps = {json.loads(p.read_text().splitlines()[0])["smp"] for p in RECORDINGS}
    assert smps == {1, 2}


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.name)
def test_recorded_kernel_events_replay_equal_under_mainline(path):
    s = run(path)
    assert s.kernel["request"] >= 100 and s.kernel["task_work"] >= 10 and s.kernel["callback"] >= 10
    assert s.compared["request.ret"] == s.kernel["request"]
    assert s.compared["trace"] >= 10
    assert not s.differences, "\n".join(d.describe() for d in s.differences[:10])
    assert s.n_equal == s.n_compared > 200


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.name)
def test_recorded_events_under_the_seed_v10_control_show_named_cookie_mismatches(path):
    s = run(path, seed_v10())
    cookies = [d for d in s.differences if d.what == "request.cookie"]
    # Every request that returned >= 0 got a mainline cookie; v10's are timestamps.
    assert len(cookies) == sum(n for r, n in s.requests_by_ret.items() if r >= 0)
    assert all(d.expected == EXPECTED["seed-v10"]["request.cookie"] for d in cookies)
    assert {d.what for d in s.expected} >= {"request.cookie", "callbacks"}


def _first(events, kind, **where):
    for i, ev in enumerate(events):
        if ev.kind == kind and all(getattr(ev, k) == v for k, v in where.items()):
            return i
    raise AssertionError(f"no {kind} {where} in the recording")


def _mutated(what, mutate):
    s = run(RECORDINGS[0], mutate=mutate)
    found = [d for d in s.differences if d.what == what]
    assert found, f"a changed {what} went unnoticed"
    return found[0]


def test_a_changed_return_value_is_a_difference_with_both_sides():
    def mutate(evs):
        i = _first(evs, "request", ret=1)
        evs[i] = dataclasses.replace(evs[i], ret=0)
        return evs

    d = _mutated("request.ret", mutate)
    assert (d.kernel, d.model) == (0, 1) and not d.expected
    assert "kernel 0 | model 1" in d.describe() and "UNEXPLAINED" in d.describe()


def test_a_changed_cookie_is_a_difference():
    def mutate(evs):
        i = _first(evs, "request", ret=0)
        evs[i] = dataclasses.replace(evs[i], cookie=evs[i].cookie + 2)
        return evs

    d = _mutated("request.cookie", mutate)
    assert d.kernel == d.model + 2


def test_a_changed_kernel_trace_is_a_difference():
    def mutate(evs):
        i = _first(evs, "callback")
        evs[i] = dataclasses.replace(evs[i], trace=evs[i].trace[:-1] + (0x1234,))
        return evs

    d = _mutated("trace", mutate)
    assert d.kernel[-1] == 0x1234 and d.model[-1] != 0x1234


def test_a_walk_the_kernel_did_not_make_is_a_difference():
    def mutate(evs):
        i = _first(evs, "walk")
        return evs[:i] + evs[i + 1:]

    d = _mutated("walks", mutate)
    assert (d.kernel, d.model) == (0, 1)


def test_a_missed_return_to_user_shows_as_cookie_and_return_differences():
    """Without the reset at a return the model keeps the old entry's cookie and bit."""
    def mutate(evs):
        w = _first(evs, "task_work")
        i = w + _first(evs[w:], "return", task=evs[w].task)  # that task's return after its task work
        return evs[:i] + evs[i + 1:]

    s = run(RECORDINGS[0], mutate=mutate)
    assert {"request.ret", "request.cookie"} <= {d.what for d in s.unexplained}


def test_a_second_callback_in_an_entry_is_counted_per_tracer():
    def mutate(evs):
        i = _first(evs, "callback")
        return evs[:i + 1] + [dataclasses.replace(evs[i], seq=evs[i].seq)] + evs[i + 1:]

    s = run(RECORDINGS[0], mutate=lambda evs: renumber(mutate(evs)))
    d = next(d for d in s.differences if d.what == "entry_callbacks")
    assert d.kernel == {"perf": 2} and d.model == {"perf": 1}
    assert any("called perf 2 times in one entry" in n for n in s.notes)


# -- hand-written sequences -----------------------------------------------------------------------


def ev(kind, **kw):
    kw.setdefault("task", TASK)
    kw.setdefault("pid", 100)
    kw.setdefault("cpu", 0)
    return Event(0, kind, **kw)


def feed(*events, profile=None, ctr=None):
    ls = Lockstep(profile or mainline(), TRACERS, ctr or {0: 0, 1: 0})
    for e in renumber(events):
        ls.feed(e)
    return ls, ls.finish()


def cookie(cpu, cnt):
    return (cnt << 32) | (cpu + 1)


def test_one_entry_request_task_work_walk_callback_return():
    c = cookie(0, 3)
    ls, s = feed(ev("request", work=WORK, ret=0, cookie=c, task_id=c),
                 ev("request", work=WORK, ret=1, cookie=c, task_id=c),
                 ev("task_work", mask=5, trace=(0x401000, 0x402000)),
                 ev("request", work=WORK, ret=1, cookie=c, task_id=c),  # an interrupt during the walk
                 ev("walk"),
                 ev("callback", work=WORK, cookie=c, trace=(0x401000, 0x402000)),
                 ev("return", point="return_irq"))
    assert not s.differences, [d.describe() for d in s.differences]
    assert s.compared["walks"] == s.compared["trace"] == s.compared["entry_callbacks"] == 1
    assert s.n_compared == 12 and not ls.open_tasks()  # 3 + 3 requests, 6 items of one entry


def test_the_per_cpu_counter_continues_from_the_kernels():
    c = cookie(1, 0x41 + 2)
    _, s = feed(ev("request", work=WORK, ret=0, cookie=c, cpu=1), ctr={0: 0, 1: 0x41})
    assert not s.differences
    _, s = feed(ev("request", work=WORK, ret=0, cookie=c, cpu=1), ctr={0: 0, 1: 0})
    assert [d.what for d in s.differences] == ["request.cookie"]


def test_exit_with_work_pending_runs_the_callbacks_in_do_exit():
    c = cookie(0, 3)
    _, s = feed(ev("request", work=WORK, ret=0, cookie=c),
                ev("exiting"),
                ev("request", work=WORK, ret=-22, cookie=0),  # PF_EXITING: -EINVAL
                ev("task_exit", mask=5, trace=(0x401000,)),
                ev("walk"),
                ev("callback", work=WORK, cookie=c, trace=(0x401000,)),
                ev("task_exit_done"))
    assert not s.differences, [d.describe() for d in s.differences]
    assert s.compared["exit_pending"] == 1 and s.compared["entry_walks"] == 1


def test_exit_the_model_has_pending_but_the_kernel_not_is_a_difference():
    _, s = feed(ev("request", work=WORK, ret=0, cookie=cookie(0, 3)),
                ev("exiting"), ev("task_exit", mask=0), ev("task_exit_done"))
    assert {d.what for d in s.differences} >= {"exit_pending"}


def test_a_fork_starts_the_child_empty_and_a_reused_task_struct_too():
    child = TASK + 0x4000
    c1, c2 = cookie(0, 3), cookie(0, 5)
    _, s = feed(ev("fork", child=child),
                ev("request", task=child, pid=101, work=WORK, ret=0, cookie=c1),
                ev("task_work", task=child, pid=101, mask=5, trace=(1,)), ev("walk", task=child, pid=101),
                ev("callback", task=child, pid=101, work=WORK, cookie=c1, trace=(1,)),
                ev("exiting", task=child, pid=101), ev("task_exit", task=child, pid=101, mask=4),
                ev("task_exit_done", task=child, pid=101),
                ev("fork", child=child),  # the same task_struct again, a new task
                ev("request", task=child, pid=102, work=WORK, ret=0, cookie=c2))
    assert not s.differences, [d.describe() for d in s.differences]


def test_events_must_come_in_order_and_be_well_formed():
    ls = Lockstep(mainline(), TRACERS)
    ls.feed(Event(5, "return", TASK, 1, 0))
    with pytest.raises(LockstepError, match="in order"):
        ls.feed(Event(5, "return", TASK, 1, 0))
    with pytest.raises(LockstepError, match="unknown kind"):
        Event(0, "nmi", TASK, 1, 0)
    with pytest.raises(LockstepError, match="without its return value"):
        Event(0, "request", TASK, 1, 0)
    with pytest.raises(LockstepError, match="unknown fields"):
        Event.from_dict({"seq": 0, "kind": "walk", "task": 1, "pid": 1, "cpu": 0, "colour": 3})
    with pytest.raises(LockstepError):
        Event.from_dict({"seq": 0, "kind": "walk"})


def test_event_dicts_round_trip():
    e = Event(7, "callback", TASK, 100, 1, "prog", work=WORK, cookie=cookie(1, 9), trace=(1, 2, 3))
    assert Event.from_dict(json.loads(json.dumps(e.to_dict()))) == e
    r = Event(8, "request", TASK, 100, 0, ret=0, cookie=0)
    assert Event.from_dict(r.to_dict()) == r
    for nr in (None, 0, 5):
        w = Event(9, "task_work", TASK, 100, 0, cache_nr=nr, trace=(1,))
        assert Event.from_dict(json.loads(json.dumps(w.to_dict()))) == w


def test_call_matcher_pairs_entry_and_return_by_cpu_and_stack_pointer():
    m = CallMatcher()
    m.enter(0, 0xFFFFC90000003F00, "outer")
    m.enter(0, 0xFFFFC90000003E00, "nested")  # an NMI's request inside an IRQ's, same CPU
    m.enter(1, 0xFFFFC90000003F00, "other cpu")
    assert m.leave(0, 0xFFFFC90000003F00) is None  # rsp at entry: not the return (rsp + 8)
    assert m.leave(0, 0xFFFFC90000003E08) == "nested"
    assert m.leave(1, 0xFFFFC90000003F08) == "other cpu"
    assert m.leave(0, 0xFFFFC90000003F08) == "outer"
    assert m.leave(0, 0xFFFFC90000003F08) is None and len(m) == 0


def test_support_from_btf_alone():
    class NoUnwind:
        def member_offset(self, t, m):
            raise KeyError(m)

        def sizeof(self, t):
            raise KeyError(t)

    ok, why = deferred_support(NoUnwind())
    assert not ok and "6.17" in why and "6.19" in why


# -- the real 7.3 kernel's code and BTF (no guest) -------------------------------------------------


@pytest.fixture(scope="module")
def kernels():
    from harness.images.kernel import get_kernel
    from harness.kernel.btf import Btf
    from harness.kernel.kallsyms import Kallsyms
    from harness.session import kallsyms_path

    out = {}
    for name in ("default", "trixie", "bookworm"):
        k = get_kernel(name)
        syms = kallsyms_path(k)
        out[name] = (k, Btf.from_elf(k.vmlinux), Kallsyms.parse(syms.read_text()) if syms.exists() else None)
    return out


def _text(vmlinux, addr: int, size: int) -> bytes:
    from elftools.elf.elffile import ELFFile

    with open(vmlinux, "rb") as f:
        for seg in ELFFile(f).iter_segments():
            if seg["p_type"] == "PT_LOAD" and seg["p_vaddr"] <= addr < seg["p_vaddr"] + seg["p_filesz"]:
                off = addr - seg["p_vaddr"]
                return seg.data()[off:off + size]
    raise AssertionError(f"{addr:#x} is in no PT_LOAD")


def test_support_of_the_three_kernels(kernels):
    k, btf, syms = kernels["default"]
    ok, why = deferred_support(btf, syms.unique() if syms else None)
    assert ok, why
    # The offsets the live part reads, as include/linux/unwind_deferred_types.h lays them out.
    assert [m.name for m in btf.members("unwind_task_info")] == ["unwind_mask", "cache", "work", "id"]
    assert btf.member_offset("unwind_cache", "entries") == 16  # (4096 - 16) / 8 = 510 entries
    assert btf.member_offset("unwind_stacktrace", "entries") == 8
    for name in ("trixie", "bookworm"):
        ok, why = deferred_support(kernels[name][1])
        assert not ok and "no deferred user unwinding" in why, name


def test_points_in_the_real_kernel_text(kernels):
    """The callback call site, the store of PF_EXITING and HARDIRQ_OFFSET, found in the 7.3
    vmlinux's own bytes."""
    from harness.lockstep.points import flag_set_sites, hardirq_offset, indirect_call_sites

    k, _, syms = kernels["default"]
    require(syms is not None, "the default kernel's kallsyms is not cached yet (one boot dumps it)")
    u = syms.unique()
    proc = u["process_unwind_deferred"]
    code = _text(k.vmlinux, proc, syms.next_symbol_address(proc) - proc)
    thunks = {a for n, a in u.items() if n.startswith("__x86_indirect_") and n.endswith("rax")}
    sites = indirect_call_sites(code, proc, thunks)
    assert len(sites) == 1 and code[sites[0] - proc] == 0xE8
    es = u["exit_signals"]
    after = flag_set_sites(_text(k.vmlinux, es, syms.next_symbol_address(es) - es), es, 0x2C, 4)
    assert len(after) == 1  # one `or $4, 0x2c(%r13)`: tsk->flags |= PF_EXITING, task_struct.flags at 44
    assert _text(k.vmlinux, after[0] - 5, 5) == bytes.fromhex("41834d2c04")
    irq = u["irq_enter_rcu"]
    # 7.3's preempt count is 64 bits with HARDIRQ at bit 24 (6.x: bit 16)
    assert hardirq_offset(_text(k.vmlinux, irq, 128)) == 1 << 24
    assert hardirq_offset(b"\x90" * 64) is None


# -- the command line without a guest --------------------------------------------------------------


def test_replay_of_a_recording_exits_0_and_prints_the_totals(capsys):
    from harness.cli import main

    assert main(["kernel-diff", "--replay", str(RECORDINGS[0])]) == 0
    out = capsys.readouterr().out
    assert "differences 0 (0 expected, 0 unexplained)" in out and "exit 0:" in out
    assert main(["kernel-diff", "--replay", str(RECORDINGS[0]), "--profile", "seed-v10"]) == 0
    assert "cookie mismatch(es) found, as expected" in capsys.readouterr().out


def test_replay_of_a_bad_file_exits_2_with_one_line(tmp_path, capsys):
    from harness.cli import main

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"seq": 0, "kind": "walk", "task": 1, "pid": 1, "cpu": 0}\n')
    assert main(["kernel-diff", "--replay", str(bad)]) == 2
    assert "no kernel-diff header" in capsys.readouterr().err
    bad.write_text('{"header": "kernel-diff", "tracers": {}}\n'
                   '{"seq": 0, "kind": "nmi", "task": 1, "pid": 1, "cpu": 0}\n')
    assert main(["kernel-diff", "--replay", str(bad)]) == 2
    assert "unknown kind 'nmi'" in capsys.readouterr().err


@pytest.mark.parametrize("kernel", ["bookworm", "trixie"])
def test_kernels_without_deferred_unwinding_are_skipped_plainly(kernel, kernels, capsys, monkeypatch):
    """6.1 and 6.12: said plainly, exit 0, no guest booted (their BTF says it)."""
    from harness.cli import main

    monkeypatch.setenv("CI", "true")  # only the default kernel lacking it would fail under CI
    assert main(["kernel-diff", "--kernel", kernel]) == 0
    out = capsys.readouterr().out
    assert f"kernel {kernels[kernel][0].release}" in out
    assert "no deferred user unwinding" in out and "checks are skipped" in out


def test_replay_of_a_changed_recording_exits_1_and_names_the_difference(tmp_path, capsys):
    from harness.cli import main

    lines = RECORDINGS[0].read_text().splitlines()
    i = next(n for n, line in enumerate(lines) if '"kind": "request"' in line and '"ret": 0' in line)
    d = json.loads(lines[i])
    d["cookie"] += 2
    lines[i] = json.dumps(d)
    changed = tmp_path / "changed.events.jsonl"
    changed.write_text("\n".join(lines) + "\n")
    assert main(["kernel-diff", "--replay", str(changed)]) == 1
    out = capsys.readouterr().out
    assert f"#{d['seq']} pid {d['pid']}" in out and "request.cookie: kernel" in out and "UNEXPLAINED" in out
    assert "exit 1: " in out


def test_the_control_names_only_what_its_revision_explains():
    """Under seed-v10 a trace difference is named only when it is 512 against 510 entries with the
    same first 510; any other trace difference stays unexplained, as under mainline."""
    c = cookie(0, 3)
    deep = tuple(range(0x401000, 0x401000 + 600))
    _, s = feed(ev("request", work=WORK, ret=0, cookie=c), ev("task_work", mask=5, trace=deep), ev("walk"),
                ev("callback", work=WORK, cookie=c, trace=deep[:510]), ev("return"), profile=seed_v10())
    trace = next(d for d in s.differences if d.what == "trace")
    assert trace.expected == EXPECTED["seed-v10"]["trace"]
    _, s = feed(ev("request", work=WORK, ret=0, cookie=c), ev("task_work", mask=5, trace=deep), ev("walk"),
                ev("callback", work=WORK, cookie=c, trace=deep[1:511]), ev("return"), profile=seed_v10())
    trace = next(d for d in s.differences if d.what == "trace")
    assert not trace.expected and trace in s.unexplained
