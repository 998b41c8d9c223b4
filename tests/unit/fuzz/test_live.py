"""harness/fuzz/live.py without a guest: a scenario's Result turned into a LiveOutcome, the names
a batch's programs get in the guest, and a batch refused before any boot when a program cannot
go into a guest.

The Results are filled from real runs' logs (tests/data/run-small: the engine's JSONL on a QEMU
guest; tests/data/broken_ra_stack.json: a stack record of a broken-RA run of Debian's
sha256sum) the way :meth:`harness.scenarios.engine.Engine._check` fills them from the same
records, and their invariant violations are the checker's verdict on the log."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from harness.deferred.check import check_events
from harness.fuzz.finding import KINDS
from harness.fuzz.live import (
    COMM_LEN,
    LIVE_LOOP_C,
    LIVE_SECONDS,
    LiveDisagreement,
    LiveProgram,
    check_live,
    guest_names,
    live_outcome,
)
from harness.images.programs import ProgramError
from harness.scenarios.catalog import CATALOG, Scenario
from harness.scenarios.engine import own_text_steps
from harness.scenarios.result import Result
from harness.verdicts.types import FAILURE, NOT_CHECKED
from tests.support.paths import TEST_DATA

RUN = TEST_DATA / "run-small"
USER = Scenario("user:sha256sum", program="sha256sum", toolchain="user", samples=20, user_path="/usr/bin/sha256sum")
PROG = LiveProgram("sha256sum", Path("/usr/bin/sha256sum"), description="Debian's, -O2, no frame pointers")


def events(name: str) -> list[dict]:
    return [json.loads(line) for line in (RUN / f"{name}.jsonl").read_text().splitlines()]


def result_from(evs: list[dict], sc: Scenario) -> Result:
    """A Result from a log's records, counted as Engine._check counts each delivered stack; a
    whole log (its header first) is checked as Engine.run checks its events."""
    r = Result(sc)
    stacks = [e for e in evs if e["ev"] == "stack"]
    r.oracles = list(dict.fromkeys(v["oracle"] for e in stacks for v in e["verdicts"] if v["oracle"] != "delivery"))
    r.declared = sc.allowed_causes(r.oracles)
    # the program's file name in the guest, as the frame records name its module
    module = Path(sc.user_path).name if sc.user_path else f"{sc.program}-{sc.variant.tag}"
    for rec in stacks:
        own = rec.get("own")
        r.foreign += own is None
        if own is not None:
            r.own_frames_checked += own_text_steps(rec["frames"].get("cfi", []), module)
        for v in rec["verdicts"]:
            if v["oracle"] != "delivery":
                r.pairs[(v["oracle"], v["verdict"])] += 1
            if v["verdict"] == NOT_CHECKED:
                r.not_checked[(v["oracle"], v.get("reason", ""))] += 1
            for d in v["divergences"]:
                if d["cause"]:
                    r.causes[d["cause"]] += 1
                    if own is not None and d["cause"] not in r.declared:
                        r.undeclared[d["cause"]] += 1
                    r.examples.setdefault(d["cause"], rec)
        r.stacks += 1
        if any(v["verdict"] == FAILURE for v in rec["verdicts"]):
            r.failed_stacks += 1
            r.failures.append(rec)
        r.sampled += own is not None
    if evs and evs[0]["ev"] == "header":
        r.invariant_violations = check_events(evs).messages()
    return r


def test_a_clean_run_is_its_stacks_and_nothing_else():
    r = result_from(events("fp-syscall"), CATALOG["fp-syscall"])
    assert r.stacks == 4 and not r.failures and r.causes == {"fp-frameless-function": 4}
    out = live_outcome(PROG, r)
    assert out.stacks == 4 and out.disagreements == [] and out.crash is None and out.ok


def test_an_unexplained_divergence_names_its_oracle_with_both_stacks():
    rec = json.loads((TEST_DATA / "broken_ra_stack.json").read_text())
    r = result_from([rec], USER)
    out = live_outcome(PROG, r)
    assert out.stacks == 1 and not out.ok and out.crash is None
    (d,) = out.disagreements
    assert (d.kind, d.unwinder, d.oracle) == ("unexplained", "fp", "cfi")
    assert d.detail == (f"pid 103 at return_irq ip={rec['regs']['ip']:#x}: "
                        "fp ends after 1 frames, cfi goes on: no cause proves it")
    got, want = d.frames
    assert len(got) == 1 and len(want) == 7
    assert got[0] == want[0] == f"{rec['regs']['ip']:#x} (sha256sum)"  # no symbol: the module
    assert want[5] == f"{rec['frames']['cfi'][5][0]:#x} __libc_start_main+0x85 (libc.so.6)"


def test_the_same_disagreement_stack_after_stack_is_kept_once():
    rec = json.loads((TEST_DATA / "broken_ra_stack.json").read_text())
    r = result_from([rec, dict(rec, task=104), rec], USER)
    out = live_outcome(PROG, r)
    assert out.stacks == 3
    assert [d.detail.split(":")[0] for d in out.disagreements] == [
        f"pid 103 at return_irq ip={rec['regs']['ip']:#x}", f"pid 104 at return_irq ip={rec['regs']['ip']:#x}"]


def test_a_failing_shadow_pair_of_a_real_run_is_a_disagreement_with_the_shadow_stack():
    r = result_from(events("forkexec"), CATALOG["forkexec"])
    assert r.failed_stacks == 1 and not r.undeclared and not r.invariant_violations
    out = live_outcome(PROG, r)
    assert out.stacks == r.own_stacks
    (d,) = out.disagreements
    assert (d.kind, d.unwinder, d.oracle) == ("unexplained", "fp", "shadow")
    assert "fp goes on past shadow's last frame (#0): no cause proves it" in d.detail
    assert d.frames[0] and d.frames[1]
    assert any("shadow did not check" in n for n in out.notes), out.notes


def test_a_cause_outside_the_declaration_is_a_disagreement():
    # forkexec's stacks judged as if callchain had made them: callchain never execs
    r = result_from(events("forkexec"), CATALOG["fp-syscall"])
    assert "execve-replaced" in r.undeclared
    out = live_outcome(PROG, r)
    und = [d for d in out.disagreements if d.kind == "undeclared"]
    assert [d.detail.split(" proven")[0] for d in und] == [f"cause {c}" for c in sorted(r.undeclared)]
    ex = next(d for d in und if "execve-replaced" in d.detail)
    assert ex.oracle in r.oracles and ex.frames[0]


def test_a_violated_invariant_is_a_disagreement_with_the_model():
    evs = events("fp-syscall")
    i = next(i for i, e in enumerate(evs) if e["ev"] == "callback")
    r = result_from(evs[:i] + evs[i + 1:], CATALOG["fp-syscall"])  # a callback the model never made
    assert r.invariant_violations
    out = live_outcome(PROG, r)
    inv = [d for d in out.disagreements if d.kind == "invariant"]
    assert [d.detail for d in inv] == r.invariant_violations
    assert all(d.oracle == "model" and d.unwinder == "fp" for d in inv)
    assert "the callback never ran" in inv[0].detail


def test_delivery_problems_are_disagreements():
    r = result_from(events("fp-syscall"), CATALOG["fp-syscall"])
    r.problems.append("pending work of [114] not delivered within 5000 stops")
    out = live_outcome(PROG, r)
    assert out.disagreements == [LiveDisagreement("delivery", "fp", "delivery", r.problems[0])]


@pytest.mark.parametrize("status, stacks, text", [
    (139, 3, "killed by SIGSEGV (status 139) after 3 checked stack(s)"),
    (128 + signal.SIGABRT, 0, "killed by SIGABRT (status 134) before its first checked stack"),
    (127, 0, "could not start (status 127: not found, or its loader failed) before its first checked stack"),
    (126, 0, "could not start (status 126: not executable)"),
    (3, 1, "exited with status 3 after 1 checked stack(s)"),
])
def test_a_program_that_died_is_a_crash_not_an_error(status, stacks, text):
    r = result_from(events("fp-syscall")[:1], USER)
    r.stacks = r.sampled = stacks
    r.program_exit = status
    r.output_tail = ["starting", "Segmentation fault"]
    out = live_outcome(PROG, r)
    assert out.crash.startswith(text), out.crash
    assert out.crash.endswith("; its output ends: starting | Segmentation fault")
    assert out.disagreements == [] and not out.ok


def test_a_program_that_ended_on_its_own_is_no_crash():
    r = result_from(events("fp-syscall"), USER)
    r.program_exit = 0
    assert live_outcome(PROG, r).crash is None
    empty = result_from(events("fp-syscall")[:1], USER)
    empty.program_exit = 0
    out = live_outcome(PROG, empty)
    assert out.crash is None and out.stacks == 0 and not out.ok
    assert any("exited with status 0 before its first checked stack" in n for n in out.notes), out.notes


# -- the batch, refused before any boot ---------------------------------------------------------

def test_an_empty_batch_boots_nothing():
    assert check_live([]) == []


def test_guest_names_are_the_binaries_own_when_they_are_unique(tmp_path):
    a, b = tmp_path / "fuzz-a", tmp_path / "fuzz-b"
    assert guest_names([LiveProgram("x", a), LiveProgram("y", b), LiveProgram("z", a)]) == ["fuzz-a", "fuzz-b", "fuzz-a"]


def test_binaries_of_one_name_get_their_programs_names(tmp_path):
    # every build's binary is "prog" in a directory of its own
    progs = [LiveProgram(n, tmp_path / d / "prog") for n, d in (("fz 1/O2", "1"), ("fz-2.O0", "2"), (".x", "3"))]
    assert guest_names(progs) == ["fz_1_O2", "fz-2.O0", "x"]


def test_names_alike_in_their_first_15_characters_are_numbered(tmp_path):
    # another name, the same comm: the first 15 characters
    progs = [LiveProgram(f"fuzz-0000000001-{v}", tmp_path / v / "prog") for v in ("fp", "nofp")]
    names = guest_names(progs)
    assert names == ["0-fuzz-0000000001-fp", "1-fuzz-0000000001-nofp"]
    assert len({n[:COMM_LEN] for n in names}) == 2
    many = [LiveProgram("p", tmp_path / str(i) / "prog") for i in range(11)]
    assert guest_names(many)[0] == "00-p" and guest_names(many)[10] == "10-p"


def test_a_program_that_is_no_elf_is_refused_before_the_boot(tmp_path):
    (tmp_path / "prog.c").write_text("int main(void) { return 0; }\n")
    with pytest.raises(ProgramError, match="not an ELF file"):
        check_live([LiveProgram("src", tmp_path / "prog.c")])
    with pytest.raises(ProgramError, match="no such file"):  # one to be copied under another name
        check_live([LiveProgram("a", tmp_path / "a" / "prog"), LiveProgram("b", tmp_path / "b" / "prog")])


def test_the_live_loop_text_is_c_for_a_template():
    assert "#define HARNESS_LIVE_LOOP()" in LIVE_LOOP_C
    assert f"#define HARNESS_LIVE_SECONDS {LIVE_SECONDS}\n" in LIVE_LOOP_C
    assert "@SECONDS@" not in LIVE_LOOP_C


# -- an outcome as the campaign's findings -------------------------------------------------------

def _built(tmp_path, **cfg):
    from harness.fuzz.build import BuildConfig, Built
    from harness.fuzz.shape import Shape

    binary = tmp_path / "prog"
    binary.write_bytes(b"\x7fELF")
    return Built(Shape.__new__(Shape), BuildConfig(**cfg), "", "prog.c", binary=binary)


def test_findings_name_what_disagreed_never_where(tmp_path):
    from harness.fuzz.live import findings_of

    rec = json.loads((TEST_DATA / "broken_ra_stack.json").read_text())
    one = live_outcome(PROG, result_from([rec], USER))
    two = live_outcome(PROG, result_from([rec, dict(rec, task=104)], USER))
    built = _built(tmp_path, toolchain="trixie", linker="mold", opt="-O3", fp=False)
    (f,) = findings_of(built, one)
    assert (f.kind, f.detail) == ("live-unexplained", "fp vs cfi")
    assert f.signature.key == findings_of(built, two)[0].signature.key  # other pids, one signature
    assert f.signature.toolchain == "trixie" and f.signature.linker == "mold" and "-O3 nofp" in f.signature.flags
    assert "ip=" in f.message and len(f.evidence["oracle"]) == 7 and len(f.evidence["unwinder"]) == 1
    assert findings_of(built, two)[0].count == 2
    clean = live_outcome(PROG, result_from(events("fp-syscall"), CATALOG["fp-syscall"]))
    assert findings_of(built, clean) == []


@pytest.mark.parametrize("status, stacks, detail", [
    (139, 3, "SIGSEGV"), (127, 0, "could not start"), (3, 1, "status 3")])
def test_a_crash_is_a_finding_by_its_signal_or_status(tmp_path, status, stacks, detail):
    from harness.fuzz.live import findings_of

    r = result_from(events("fp-syscall")[:1], USER)
    r.stacks = r.sampled = stacks
    r.program_exit = status
    (f,) = findings_of(_built(tmp_path), live_outcome(PROG, r))
    assert (f.kind, f.detail) == ("live-crash", detail) and f.message.startswith(("killed", "could", "exited"))


def test_a_run_without_stacks_is_a_finding_and_a_failed_build_is_not_run(tmp_path):
    from harness.fuzz.build import BuildConfig, Built
    from harness.fuzz.live import LiveChecker, findings_of
    from harness.fuzz.shape import Shape

    empty = result_from(events("fp-syscall")[:1], USER)
    empty.program_exit = 0
    (f,) = findings_of(_built(tmp_path), live_outcome(PROG, empty))
    assert f.kind == "live-no-stacks" and "before its first checked stack" in f.message
    failed = Built(Shape.__new__(Shape), BuildConfig(), "", "prog.c", error="cc1: fatal error")
    (b,) = LiveChecker()(failed)  # no guest: a build that failed is its own finding
    assert (b.kind, b.detail) == ("build-failed", "cc1: fatal error")


def test_stacks_judged_with_none_of_the_programs_own_frames_checked_are_a_disagreement():
    """The mold PIE's run: every stack agreed or was explained, but the CFI oracle found no FDE for
    any of the program's frames (read with a wrong load bias), so it checked none of them."""
    r = result_from(events("fp-syscall"), CATALOG["fp-syscall"])
    assert r.own_frames_checked > 0 and live_outcome(PROG, r).ok
    r.own_frames_checked = 0  # as a log whose CFI walks ended at the program's first frame counts
    out = live_outcome(PROG, r)
    assert not out.ok
    assert [(d.kind, d.oracle) for d in out.disagreements] == [("unchecked", "cfi")]
    assert "none of the program's own frames" in out.disagreements[0].detail


def test_a_stack_in_the_vdso_whose_cfi_walk_never_reaches_the_program_is_a_disagreement(tmp_path):
    """Counted as the delivery check counts each stack (in_vdso, reaches): a stack whose CFI
    oracle's topmost frame is in the vDSO and goes on into the program is a vDSO stack; one whose
    walk ends in the vDSO (or in libc) lost the caller by the ground truth itself: no cause
    explains that, it is a disagreement of its own kind."""
    from harness.fuzz.live import findings_of
    from harness.scenarios.delivery import in_vdso, reaches

    r = result_from(events("fp-syscall"), CATALOG["fp-syscall"])
    module = f"{CATALOG['fp-syscall'].program}-{CATALOG['fp-syscall'].variant.tag}"
    rec = next(s for s in events("fp-syscall") if s["ev"] == "stack" and s["own"])
    cfi = rec["frames"]["cfi"]
    assert not in_vdso(cfi) and reaches(cfi, module)
    good = [[0x7FFF_F7FC_1000, "[vdso]", "__vdso_clock_gettime+0x40"], *cfi]
    lost = [[0x7FFF_F7FC_1000, "[vdso]", "__vdso_clock_gettime+0x40"], [0x7FFF_F7F0_0000, "libc.so.6", ""]]
    for frames in (good, lost, lost):
        r.vdso_stacks += in_vdso(frames)
        r.vdso_lost += in_vdso(frames) and not reaches(frames, module)
    assert (r.vdso_stacks, r.vdso_lost) == (3, 2)
    out = live_outcome(PROG, r)
    assert out.vdso_stacks == 3 and not out.ok
    (d,) = out.disagreements
    assert (d.kind, d.oracle) == ("vdso-lost", "cfi") and d.detail.startswith("2 of 3 stack(s) sampled in the vDSO")
    (f,) = findings_of(_built(tmp_path), out)
    assert f.kind == "live-vdso-lost" and f.kind in KINDS


def test_debian_perfs_report_becomes_counts_disagreements_and_notes():
    """perf_outcome: a difference without a name is a disagreement with the oracle perf; a named
    one outside the declaration too; the counts say how much was compared."""
    from collections import Counter

    from harness.fuzz.live import perf_outcome
    from harness.perf.debian import DebianReport

    clean = DebianReport(perf_version="7.3.4", samples=10, ours_compared=8, ours_equal=8, merged_compared=10,
                         merged_equal=10, named=Counter({"perf-script-sample-after-record": 1}))
    counts, found, notes = perf_outcome(clean, "fp")
    assert found == [] and counts["ours_compared"] == 8 and counts["named"] == {"perf-script-sample-after-record": 1}
    assert notes[0].startswith("Debian perf 7.3.4: 8 deferred record(s) against our unwinder (8 equal)")
    bad = DebianReport(ours_compared=0, unexplained=["pid 7 cookie 0x3: perf's record has 4 ips, ours 2"],
                       named=Counter({"fp-frameless-function": 2}), declared=frozenset())
    counts, found, notes = perf_outcome(bad, "sframe")
    assert [(d.kind, d.unwinder, d.oracle) for d in found] == [("perf", "sframe", "perf"),
                                                               ("perf-undeclared", "sframe", "perf")]
    assert "fp-frameless-function" in found[1].detail
    assert any("compared none" in n for n in notes)


def test_the_perf_oracle_is_skipped_with_its_reason_where_the_kernel_cannot_give_it(tmp_path):
    from harness.fuzz.live import perf_unavailable
    from harness.images.errors import ImageError
    from harness.images.kernel import get_kernel
    from tests.support.gating import require

    assert "not a kernel tree or file" in perf_unavailable(f"tree:{tmp_path}")
    bz = tmp_path / "bzImage"
    bz.write_bytes(b"\0")
    assert "not a kernel tree or file" in perf_unavailable(str(bz))
    try:
        old, new = get_kernel("bookworm"), get_kernel("default")
    except ImageError as exc:
        require(False, f"kernels unavailable: {exc}")
    why = perf_unavailable("bookworm")
    assert why.startswith(f"{old.package}={old.version}: ") and "no deferred unwinding" in why
    assert perf_unavailable(None) is None and new.version  # 7.x: perf's deferred callchains
