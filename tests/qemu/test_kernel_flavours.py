"""The default suite's other kernel flavours, as a user names them: ``--kernel generic`` and
``--kernel rt`` (PREEMPT_RT), each running the default scenarios through the command line.

PREEMPT_RT once hung the run before its first scenario: the 8250's handler is a thread there, the
spurious-IRQ check disabled the dump port's IRQ and the /proc/kallsyms dump never ended
(harness/transport/qemu.py: ``noirqdebug``, and a dump bounded by stalls, not by its length).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.scenarios.catalog import DEFAULT_SET

pytestmark = pytest.mark.qemu

HARNESS = [sys.executable, "-c", "import sys; from harness.cli import main; sys.exit(main())"]
SAMPLES = 20


@pytest.mark.parametrize("kernel", ["generic", "rt"])
def test_the_default_scenarios_pass_on_the_flavour(kernel, tmp_path):
    out = tmp_path / "run"
    # the first boot of a kernel build dumps its kallsyms (about a minute on rt under load)
    p = subprocess.run([*HARNESS, "run", "--kernel", kernel, "--samples", str(SAMPLES), "--out", str(out)],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    release = summary["run"]["release"]
    assert release.endswith("-rt-amd64" if kernel == "rt" else "+deb13-amd64"), release
    assert [s["name"] for s in summary["scenarios"]] == list(DEFAULT_SET)
    for s in summary["scenarios"]:
        assert s["own_stacks"] >= SAMPLES and s["failed_stacks"] == 0 and not s["errors"], s
