"""``harness run`` on a pseudo-terminal keeps a live status line for the boot and the sampling
(rewritten in place with growing counts, the final state left as a permanent line, the table
after it); with stderr in a file the same run writes plain lines only."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pexpect
import pytest

pytestmark = pytest.mark.qemu

HARNESS = ["-c", "import sys; from harness.cli import main; sys.exit(main())"]
STATE = re.compile(r"\r\[run\] fp-syscall: (\d+)/20 requests on its tasks \((\d+) in all\), (\d+) stacks checked, "
                   r"(\d+) failed \(\d+s\)\x1b\[K")


def _env() -> dict:
    return {**os.environ, "TERM": "xterm", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def test_run_on_a_terminal_rewrites_one_status_line_then_prints_the_table(tmp_path):
    child = pexpect.spawn(sys.executable, [*HARNESS, "run", "fp-syscall", "--samples", "20",
                                           "--out", str(tmp_path / "run")],
                          env=_env(), encoding="utf-8", timeout=600, dimensions=(24, 250))
    child.expect(pexpect.EOF)
    child.close()
    out = child.before
    print(out.replace("\r", "<CR>").replace("\x1b[K", "<EL>"))
    assert child.exitstatus == 0, out[-3000:]
    # The boot: a live line, then a permanent "ready in N s" line.
    assert re.search(r"\r\[guest\] booting \S+ \((tcg|kvm), 1 vCPU\) \(\d+s\)\x1b\[K", out)
    assert re.search(r"\r\[guest\] \S+ ready in [\d.]+s \((tcg|kvm), 1 vCPU\)\x1b\[K\r\n", out)
    # The sampling: several states rewritten in place, their counts growing.
    states = [tuple(map(int, m.groups())) for m in STATE.finditer(out)]
    assert len(re.findall(r"\r\[run\] fp-syscall: [^\r\n]*\(\d+s\)\x1b\[K", out)) >= 3  # "starting" too
    assert len(states) >= 2, states
    assert [s[0] for s in states] == sorted(s[0] for s in states) and states[-1][0] > states[0][0]
    assert [s[2] for s in states] == sorted(s[2] for s in states)
    end = re.search(r"\r\[run\] fp-syscall: 20/20 requests on its tasks \(\d+ in all\), (\d+) stacks checked, "
                    r"0 failed, in [\d.]+s\x1b\[K\r\n", out)
    assert end and int(end.group(1)) >= 20
    # Every transient state sits on the same line: no newline between the first and the last.
    first = STATE.search(out)
    assert "\n" not in out[first.start():end.start()]
    # The table follows the final line.
    assert re.search(r"\nscenario +stacks", out[end.end():])
    assert out.rstrip().endswith("every stack agrees or is explained")


def test_run_with_stderr_to_a_file_writes_plain_lines(tmp_path):
    err = tmp_path / "stderr"
    with open(err, "w") as fp:
        p = subprocess.run([sys.executable, *HARNESS, "run", "fp-syscall", "--samples", "20",
                            "--out", str(tmp_path / "run")],
                           env=_env(), stdout=subprocess.PIPE, stderr=fp, text=True, timeout=600)
    text = err.read_text()
    print(text)
    assert p.returncode == 0, p.stdout[-3000:] + text[-3000:]
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert any(re.match(r"\[guest\] booting \S+ \((tcg|kvm), 1 vCPU\)$", ln) for ln in lines)
    assert any(re.match(r"\[guest\] \S+ ready in [\d.]+s", ln) for ln in lines)
    assert "[run] fp-syscall: starting" in lines
    assert re.match(r"\[run\] fp-syscall: 20/20 requests on its tasks \(\d+ in all\), \d+ stacks checked, "
                    r"0 failed, in ",
                    [ln for ln in lines if ln.startswith("[run]")][-1])
    assert sum(ln.startswith("[run]") for ln in lines) <= 2 + 10 + 2  # start, end, a tenth a second at most
    assert "scenario" in p.stdout and "[run]" not in p.stdout
