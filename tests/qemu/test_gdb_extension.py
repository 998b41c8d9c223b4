"""``harness boot --gdb`` for real: gdb in batch mode with the harness's extension (kernel symbols
from kallsyms, ``tasks``, ``user-bt``, ``deferred``) on the default kernel (7.x) and on 6.1, and the
extension loaded into a gdb started by hand against the socket ``harness boot`` prints."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.qemu

REPO = Path(__file__).resolve().parents[2]
KERNELS = ["default", "bookworm"]
CLI = ["-c", "import sys; from harness.cli import main; sys.exit(main())"]
TIMEOUT = 360


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO), "TERM": "dumb"}


def _boot_gdb(kernel: str, *ex: str) -> subprocess.CompletedProcess:
    args = [sys.executable, *CLI, "boot", "--gdb", "--kernel", kernel, "--start", "fp-spin", "--batch"]
    for cmd in ex:
        args += ["-ex", cmd]
    return subprocess.run(args, env=_env(), cwd=str(REPO), capture_output=True, text=True, check=False, timeout=TIMEOUT)


@pytest.mark.parametrize("kernel", KERNELS)
def test_gdb_batch_with_the_extension(kernel):
    r = _boot_gdb(kernel, "tasks", "user-bt callchain", "deferred request callchain", "deferred deliver",
                  "deferred", "break hrtimer_interrupt", "continue", "bt 2", "x/2i $pc", "info symbol $pc")
    out = r.stdout
    assert r.returncode == 0, out[-3000:] + r.stderr[-3000:]
    assert "kernel symbols from kallsyms loaded" in out
    pid = re.search(r"started pid (\d+): /progs/host/callchain-fp-sframe-static-64-shadow", out).group(1)
    # --start: the guest is handed to gdb stopped where the program runs in user mode (not wherever
    # gdb's connection happened to stop it): gdb's first stop is its user pc, user-bt sees it there
    assert re.search(rf"\[harness: pid {pid} \(callchain-fp-sf\) runs in user mode on cpu 0 at 0x", out), out
    assert re.search(r"\n0x0000000000[0-9a-f]+ in \?\? \(\)\n", out), out
    assert re.search(rf"pid {pid} callchain-fp-sf cookie 0x0 at cpu 0 in user mode", out), out
    # tasks: the program is a user task
    assert re.search(rf"\n{pid}\s+{pid}\s+callchain-fp-sf\s+\d+\s+\S+\s+user", out), out
    # user-bt: every unwinder and oracle side by side, symbolized, each pair judged
    assert re.search(r"fp\s+sframe\s+cfi\s+shadow", out), out
    assert re.search(r"#0\s+\w+\+0x[0-9a-f]+ \(callchain-fp-sf", out), out
    assert "main+0x" in out and re.search(r"fp vs cfi: (agree|explained)", out), out
    assert "UNEXPLAINED" not in out and ": failure" not in out, out
    # deferred: a request by hand, stepped to its delivery, the model's state after it
    assert re.search(rf"request for pid {pid} .*: 0 queued", out) and "PENDING|shell" in out, out
    assert re.search(r"delivered to tracer shell at \w+: cookie 0x[0-9a-f]+", out), out
    assert re.search(rf"\n{pid}\s+no\s+\d+\s+0x0\s+no\s+-", out), out
    # kernel symbols without debuginfo: breakpoints by name, bt and x/i name kernel functions
    assert re.search(r"Breakpoint 1, 0x[0-9a-f]+ in hrtimer_interrupt \(\)", out), out
    assert re.search(r"#0\s+0x[0-9a-f]+ in hrtimer_interrupt \(\)", out), out
    assert re.search(r"#1\s+0x[0-9a-f]+ in \w*(apic_timer_interrupt|sysvec)\w* \(\)", out), out
    assert "<hrtimer_interrupt>:" in out and "hrtimer_interrupt in section .kernel" in out, out


@pytest.mark.parametrize("kernel", KERNELS)
def test_extension_loads_into_a_gdb_started_by_hand(kernel):
    boot = subprocess.Popen([sys.executable, *CLI, "boot", "--kernel", kernel, "--start", "fp-spin"], env=_env(),
                            cwd=str(REPO),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        deadline = time.monotonic() + TIMEOUT
        line = ""
        while time.monotonic() < deadline:
            line = boot.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("Ctrl-C"):
                break
        text = "".join(lines)
        gdb_line = next((ln.strip() for ln in lines if ln.strip().startswith("gdb -q ")), None)
        assert gdb_line, text
        assert re.search(r"started pid \d+: /progs/host/callchain", text), text
        cmd = shlex.split(gdb_line) + ["-batch", "-ex", "tasks", "-ex", "user-bt callchain", "-ex", "info symbol $pc"]
        r = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
        assert "kernel symbols from kallsyms loaded" in r.stdout, r.stdout + r.stderr
        assert re.search(r"fp\s+sframe\s+cfi\s+shadow", r.stdout), r.stdout + r.stderr
        assert "main+0x" in r.stdout, r.stdout
    finally:
        boot.send_signal(signal.SIGTERM)
        try:
            boot.wait(timeout=30)
        except subprocess.TimeoutExpired:
            boot.kill()
            boot.wait()


def test_batch_and_ex_without_gdb_are_bad_usage():
    r = subprocess.run([sys.executable, *CLI, "boot", "--batch", "-ex", "tasks"], env=_env(), cwd=str(REPO),
                       capture_output=True, text=True, check=False, timeout=60)
    assert r.returncode == 2 and "--batch and -ex go with --gdb" in r.stderr, r.stderr
