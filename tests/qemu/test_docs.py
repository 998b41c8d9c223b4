"""The examples of README.md and docs/*.md that boot a guest (marked ``<!-- doc-test: qemu -->``),
run as a user runs them and compared with the output the page shows.

Kept to four short ones (a 20-request run, a shell --batch script, gdb in batch mode, the pytest
plugin's example: each one boot and seconds of sampling); the longer examples are marked not run,
with the reason, and their command lines are still checked against --help by tests/unit/test_docs.py.
(Named test_docs.py, not test_docs.py: until tests/ and tests/qemu/ are packages, two test
modules may not share a base name.)
"""

from __future__ import annotations

import pytest

from tests.support import docs

pytestmark = pytest.mark.qemu

QEMU = [e for e in docs.examples() if e.suite == "qemu"]
TIMEOUT = 600  # a first boot may build the initramfs and dump kallsyms


def test_there_are_few_guest_examples():
    assert 1 <= len(QEMU) <= 4, [e.id for e in QEMU]


@pytest.mark.parametrize("example", QEMU, ids=[e.id for e in QEMU])
def test_guest_example_runs_as_shown(example, tmp_path):
    docs.run(example, tmp_path, timeout=TIMEOUT)
