"""JUnit XML for CI systems: one test case per scenario.

A scenario whose stacks all agree or are explained passes; failing stacks become a ``<failure>``
whose text is each failing pair side by side (the same renderer as the terminal); an
infrastructure error (guest died, timeout, interrupted) becomes an ``<error>``.  The per-cause
totals and per-oracle verdicts go in ``<properties>`` so a CI can chart them.  Written with the
standard library's ElementTree: the format is a handful of elements, and the tests read the file
back with junitparser, a maintained consumer of the format.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from .text import stack_failures

__all__ = ["junit_xml"]

FAILURE_STACKS_SHOWN = 20  # per scenario; the JSONL log has them all


def _case(r, suite_name: str) -> ET.Element:
    case = ET.Element("testcase", classname=suite_name, name=r.scenario.name, time=f"{r.seconds:.3f}")
    props = ET.SubElement(case, "properties")
    for name, value in [("stacks", r.stacks), ("own stacks", r.own_stacks),
                        *((f"cause {c}", n) for c, n in sorted(r.causes.items())),
                        *((f"{o} {v}", n) for (o, v), n in sorted(r.pairs.items()))]:
        ET.SubElement(props, "property", name=name, value=str(value))
    if r.errors:
        err = ET.SubElement(case, "error", message=r.errors[0].splitlines()[0][:200], type="infrastructure")
        err.text = "\n".join(r.errors)
    problems = r.failed_stacks + len(r.problems) + len(r.invariant_violations)
    if problems or (not r.errors and r.stacks == 0):
        what = (f"{r.failed_stacks} failing stack(s), {len(r.problems)} delivery problem(s), "
                f"{len(r.invariant_violations)} invariant violation(s)" if problems else "no stack was delivered")
        fail = ET.SubElement(case, "failure", message=what, type="unwinding")
        texts = [t for rec in r.failures[:FAILURE_STACKS_SHOWN] for t in stack_failures(rec)]
        texts += r.problems + r.invariant_violations
        if r.failed_stacks > FAILURE_STACKS_SHOWN:
            texts.append(f"... and {r.failed_stacks - FAILURE_STACKS_SHOWN} more failing stacks in the JSONL log")
        fail.text = "\n\n".join(texts)
    out = ET.SubElement(case, "system-out")
    out.text = "\n".join(r.notes)
    return case


def junit_xml(results, suite_name: str = "harness.run") -> bytes:
    suite = ET.Element("testsuite", name=suite_name, tests=str(len(results)),
                       failures=str(sum(1 for r in results if r.failed_stacks or r.problems or r.invariant_violations
                                        or (not r.errors and r.stacks == 0))),
                       errors=str(sum(1 for r in results if r.errors)),
                       time=f"{sum(r.seconds for r in results):.3f}")
    for r in results:
        suite.append(_case(r, suite_name))
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)
