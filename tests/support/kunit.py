"""The kernel's own KTAP parser, ``tools/testing/kunit/kunit_parser.py``, imported from the
linux-source tree the harness fetches (harness.images.kernel_source), never vendored: the tests
read the harness's KTAP with the reader KernelCI's and ``kunit.py parse``'s users have."""

from __future__ import annotations

import importlib
import io
import sys
from types import ModuleType


def kunit_parser() -> ModuleType:
    from harness.images.kernel_source import get_linux_source
    kunit = get_linux_source().tree / "tools/testing/kunit"
    if str(kunit) not in sys.path:
        sys.path.insert(0, str(kunit))
    return importlib.import_module("kunit_parser")


def parse_ktap(text: str):
    """``(Test, printed)``: the parser's tree of tests and what it printed (its summary lines)."""
    parser = kunit_parser()
    printer_mod = importlib.import_module("kunit_printer")
    out = io.StringIO()
    test = parser.parse_run_tests(text.splitlines(), printer_mod.Printer(output=out))
    return test, out.getvalue()


def leaves(test) -> list:
    """``(path, status)`` of every test case (a test without subtests) under ``test``."""
    if not test.subtests:
        return [(test.name, test.status)]
    return [(f"{test.name}/{p}", s) for sub in test.subtests for p, s in leaves(sub)]
