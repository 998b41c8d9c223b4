"""The command line on a real guest, as CI runs it: exit codes, JUnit XML, summary.json, and Ctrl-C
(SIGINT), SIGTERM and SIGHUP ending a run with its partial table and a log closed by an
"interrupted" end record; a QEMU killed or stopped under a run ending the whole run at once."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import junitparser
import pytest

from tests.support.foreground import foreground_signals

pytestmark = pytest.mark.qemu

HARNESS = [sys.executable, "-c", "import sys; from harness.cli import main; sys.exit(main())"]


def test_a_clean_run_exits_0_with_junit_and_summary(tmp_path):
    out, junit = tmp_path / "run", tmp_path / "junit.xml"
    # --rt where it may be (root: CI): the run's facts say what it did
    rt = ["--rt"] if os.geteuid() == 0 else []
    p = subprocess.run([*HARNESS, "run", "fp-syscall", "--samples", "10", *rt, "--out", str(out),
                        "--junit-xml", str(junit), "--cross-examine"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert p.stdout.rstrip().endswith("exit 0: every stack agrees or is explained")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exit_code"] == 0 and summary["scenarios"][0]["log"] == "fp-syscall.jsonl"
    assert summary["scenarios"][0]["stacks"] >= 10 and summary["run"]["kernel"]
    assert summary["run"]["realtime"].startswith("QEMU's main loop (pid ") if rt else summary["run"]["realtime"] == ""
    suite = next(iter(junitparser.JUnitXml.fromfile(str(junit))))
    case = next(iter(suite))
    assert case.name == "fp-syscall" and case.is_passed
    last = json.loads((out / "fp-syscall.jsonl").read_text().splitlines()[-1])
    assert last["ev"] == "end" and last["reason"] == "complete"
    # --cross-examine: fp-syscall's causes (glibc's __libc_start_call_main keeps no frame pointer)
    # asked of objdump, each confirmed; the table, summary.json and the end record count them
    sc = summary["scenarios"][0]
    claimed = sum(n for c, n in sc["causes"].items() if c != "truncated")
    assert claimed and sc["cross_examined"] == {"confirmed": claimed} and sc["contradicted"] == {}, sc
    assert summary["totals"]["cross_examined"] == sc["cross_examined"] and last["cross"] == sc["cross_examined"]
    assert "causes cross-examined by the toolchain's own tools" in p.stdout
    assert sc["own_frames_checked"] > 0


def test_sigint_ends_the_run_with_its_partial_table_and_exit_3(tmp_path):
    out = tmp_path / "run"
    log = out / "fp-spin.jsonl"
    p = subprocess.Popen([*HARNESS, "run", "fp-spin", "fp-syscall", "--samples", "100000", "--out", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=foreground_signals)
    try:
        started = time.monotonic()
        deadline = started + 300
        while time.monotonic() < deadline and p.poll() is None:
            if log.exists() and '"ev":"stack"' in log.read_text():
                break
            time.sleep(0.5)
        assert p.poll() is None, p.communicate()
        assert log.exists() and '"ev":"stack"' in log.read_text(), "no stack delivered within 300 s"
        sent = time.monotonic()
        os.kill(p.pid, signal.SIGINT)
        try:
            stdout, stderr = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            # Where it is stuck (harness.cli registers faulthandler on SIGUSR1), for the report.
            os.kill(p.pid, signal.SIGUSR1)
            time.sleep(2)
            p.kill()
            stdout, stderr = p.communicate()
            pytest.fail(f"no exit within 60 s of SIGINT, sent {sent - started:.1f} s after the start "
                        f"({log.read_text().count(chr(10))} log lines then); stderr:\n{stderr[-6000:]}")
        took = time.monotonic() - sent
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    print(f"SIGINT to exit: {took:.1f} s")
    assert p.returncode == 3, stdout[-3000:] + stderr[-3000:]
    assert "fp-spin" in stdout and "stacks" in stdout  # the partial table
    assert "interrupted" in stdout.splitlines()[-1]
    end = json.loads(log.read_text().splitlines()[-1])
    assert end["ev"] == "end" and end["reason"] == "interrupted" and end["stacks"] >= 1
    assert not (out / "fp-syscall.jsonl").exists()  # the next scenario never started
    assert json.loads((out / "summary.json").read_text())["exit_code"] == 3


# -- a guest that dies or hangs, and signals: the whole run ends at once, and well --------------

def _start_run(out):
    """`harness run fp-spin fp-syscall` (far more samples than it will take) and the pid of its
    QEMU (a child of this harness, never another's), once fp-spin has checked a stack."""
    from tests.support.procs import children, cmdline

    log = out / "fp-spin.jsonl"
    p = subprocess.Popen([*HARNESS, "run", "fp-spin", "fp-syscall", "--samples", "100000", "--out", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=foreground_signals)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and p.poll() is None:
        if log.exists() and '"ev":"stack"' in log.read_text():
            break
        time.sleep(0.5)
    if p.poll() is not None or not (log.exists() and '"ev":"stack"' in log.read_text()):
        p.kill()
        pytest.fail(f"no stack delivered within 300 s: {p.communicate()}")
    qemu = [c for c in children(p.pid) if any("qemu-system" in a for a in cmdline(c))]
    assert len(qemu) == 1, [(c, cmdline(c)[:3]) for c in children(p.pid)]
    return p, qemu[0]


def _finish(p, within: float = 120):
    """stdout and stderr of the run once it ends; a run that does not end within ``within``
    seconds (a generous bound: the point is that it ends) is a failure, with where it is stuck."""
    try:
        return p.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        os.kill(p.pid, signal.SIGUSR1)
        time.sleep(2)
        p.kill()
        stdout, stderr = p.communicate()
        pytest.fail(f"the run did not end within {within} s; stderr:\n{stderr[-6000:]}")


def _ended_well(p, out, qemu: int, stdout: str, stderr: str, reason: str) -> dict:
    """What every such end leaves: rc 3, the table, summary.json, each log closed by an end
    record that says why and that harness check reads, no QEMU and no guest directory left,
    and the next scenario never started."""
    from harness.deferred.log import read_events
    from harness.transport.qemu import WORKDIR_PREFIX
    from tests.support.procs import gone

    assert p.returncode == 3, stdout[-3000:] + stderr[-3000:]
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr[-6000:]
    assert "fp-spin" in stdout and "stacks" in stdout  # the table of what was done
    last = stdout.rstrip().splitlines()[-1]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exit_code"] == 3 and summary["outcome"] == last.split(": ", 1)[1]
    assert [s["name"] for s in summary["scenarios"]] == ["fp-spin"]
    assert not (out / "fp-syscall.jsonl").exists()
    lines = (out / "fp-spin.jsonl").read_text().splitlines()
    events = list(read_events(lines))  # structurally sound: header, seqs, types, digest
    end = events[-1]
    assert end["ev"] == "end" and end["reason"] == reason and end["errors"], end
    deadline = time.monotonic() + 10
    while not gone(qemu) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(qemu), "QEMU outlived the run"
    left = [d for d in Path(tempfile.gettempdir()).glob(WORKDIR_PREFIX + "*")
            if (d / "owner").exists() and (d / "owner").read_text().strip() == str(p.pid)]
    assert not left, left
    return end


def test_qemu_killed_mid_run_ends_the_whole_run_with_its_cause(tmp_path):
    out = tmp_path / "run"
    p, qemu = _start_run(out)
    try:
        os.kill(qemu, signal.SIGKILL)
        stdout, stderr = _finish(p)
    finally:
        if p.poll() is None:
            p.kill()
    end = _ended_well(p, out, qemu, stdout, stderr, "error")
    last = stdout.rstrip().splitlines()[-1]
    assert last.startswith("exit 3: fp-spin: QEMU was killed by signal 9 (SIGKILL)"), last
    assert "after 1 of 2 scenario(s)" in last
    assert end["errors"][0] == "the guest is lost: QEMU was killed by signal 9 (SIGKILL)"


def test_qemu_stopped_mid_run_ends_the_whole_run_within_its_bound(tmp_path):
    out = tmp_path / "run"
    p, qemu = _start_run(out)
    try:
        os.kill(qemu, signal.SIGSTOP)
        # The stub's bounds (a stop within 15 s, an answer to the interrupt within 5 s) and
        # QEMU's shutdown; 120 s is generous on a loaded machine: what is asserted is that it ends.
        stdout, stderr = _finish(p, within=120)
    finally:
        if p.poll() is None:
            os.kill(qemu, signal.SIGCONT)
            p.kill()
    end = _ended_well(p, out, qemu, stdout, stderr, "error")
    last = stdout.rstrip().splitlines()[-1]
    assert last.startswith(f"exit 3: fp-spin: QEMU (pid {qemu}) is stopped"), last
    assert "answers nothing" in end["errors"][0]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_end_a_run_as_sigint_does(sig, tmp_path):
    out = tmp_path / "run"
    p, qemu = _start_run(out)
    try:
        os.kill(p.pid, sig)
        stdout, stderr = _finish(p)
    finally:
        if p.poll() is None:
            p.kill()
    end = _ended_well(p, out, qemu, stdout, stderr, "interrupted")
    name = signal.Signals(sig).name
    assert end["errors"] == [f"interrupted ({name})"]
    assert stdout.rstrip().splitlines()[-1] == "exit 3: interrupted after 1 of 2 scenario(s)"


@pytest.mark.parametrize("delay", [0.05, 0.5])
def test_a_second_signal_during_the_clean_up_ends_it_quietly(delay, tmp_path):
    out = tmp_path / "run"
    p, qemu = _start_run(out)
    try:
        os.kill(p.pid, signal.SIGINT)
        time.sleep(delay)
        if p.poll() is None:
            os.kill(p.pid, signal.SIGTERM)
        stdout, stderr = _finish(p)
    finally:
        if p.poll() is None:
            p.kill()
    _ended_well(p, out, qemu, stdout, stderr, "interrupted")


# -- QEMU lost while the guest boots: its signal named, the run directory kept (issue 34) -----------

BOOT_LOSSES = [
    (signal.SIGKILL, r"QEMU was killed by signal 9 \(SIGKILL\) during boot, "),
    # QEMU handles SIGTERM itself once it runs (it prints "terminating on signal 15 from pid N"
    # and exits 0); one that comes before its handler is set kills it
    (signal.SIGTERM, r"QEMU was (terminated by signal 15 \(SIGTERM\) from pid \d+ \(QEMU's own handler: exit "
                     r"status 0\)|killed by signal 15 \(SIGTERM\)) during boot, "),
]


@pytest.mark.parametrize("sig,said", BOOT_LOSSES, ids=[s.name for s, _ in BOOT_LOSSES])
def test_qemu_killed_during_boot_names_its_signal_and_keeps_the_run_directory(tmp_path, sig, said):
    from harness.transport.qemu import WORKDIR_PREFIX
    from tests.support.procs import children, cmdline, gone

    out = tmp_path / "run"
    p = subprocess.Popen([*HARNESS, "run", "fp-syscall", "--samples", "5", "--out", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=foreground_signals)
    try:
        qemu = found = None
        deadline = time.monotonic() + 300  # a first run may build the images
        while qemu is None and time.monotonic() < deadline and p.poll() is None:
            # The guest's QEMU, by its control socket: not the `qemu-system-x86_64 --version`
            # the harness runs first to name Debian 12's QEMU (HARNESS_QEMU=host), which the
            # poll caught in both cases of a 7.2 run of the flake campaign at 2de0bf6.
            for c in children(p.pid):
                found = re.search(r"path=(\S+/ctl\.sock)", " ".join(cmdline(c)))
                if found and any("qemu-system" in a for a in cmdline(c)):
                    qemu = c
                    break
            time.sleep(0.01)
        assert qemu is not None, p.communicate()
        # once QEMU has made its sockets (its signal handlers are set by then), the guest still
        # booting (it takes seconds even with KVM)
        ctl = Path(found.group(1))
        while not ctl.exists() and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.01)
        os.kill(qemu, sig)
        stdout, stderr = _finish(p)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 3, stdout[-3000:] + stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-6000:]
    last = stderr.rstrip().splitlines()[-1]
    assert re.match(f"harness run: {said}", last), last
    # what the run knew, and why it ended, beside where its logs would have been
    facts = json.loads((out / "run.json").read_text())
    assert facts["kernel"]["release"] and facts["qemu"].startswith("QEMU emulator version")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exit_code"] == 3 and summary["scenarios"] == [] and summary["run"] == facts
    assert summary["outcome"] == last.removeprefix("harness run: ") + "; 0 of 1 scenario(s) ran"
    assert not (out / "fp-syscall.jsonl").exists()
    assert gone(qemu)
    left = [d for d in Path(tempfile.gettempdir()).glob(WORKDIR_PREFIX + "*")
            if (d / "owner").exists() and (d / "owner").read_text().strip() == str(p.pid)]
    assert not left, left
