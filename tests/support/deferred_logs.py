"""Event logs of the deferred model with ``stack`` and ``end`` records, written by the real
:class:`harness.deferred.EventLog`: the log checker's tests (tests/unit/deferred/test_log_records.py)
and the exit-code contract (tests/unit/test_cli_exit_codes.py) read them."""

from __future__ import annotations

import copy
import io
import json

from harness.deferred import IRQ, Context, DeferredModel, EventLog, UnwindWork, mainline
from harness.deferred.check import check_lines
from tests.support.eventlog import relog

STACKS = ([0x401000, 0x401100, 0x401200], [0x401000, 0x401180], [0x402000, 0x401100, 0x401200, 0x7F0000])


def frames(addrs) -> list[list]:
    return [[a, "callchain-fp-sta", f"f{i}+0x10"] for i, a in enumerate(addrs)]


def agree(oracle: str) -> dict:
    return {"unwinder": "fp", "oracle": oracle, "verdict": "agree", "divergences": []}


def explained(oracle: str, *causes: str) -> dict:
    return {"unwinder": "fp", "oracle": oracle, "verdict": "explained",
            "divergences": [{"kind": "lost", "got_index": 1, "want_index": 1, "cause": c,
                             "evidence": {"ip": 0x401100}, "text": f"frame 1 lost ({c})"} for c in causes]}


def failure(oracle: str) -> dict:
    return {"unwinder": "fp", "oracle": oracle, "verdict": "failure",
            "divergences": [{"kind": "ends", "got_index": 1, "want_index": 1, "cause": "leaf-no-frame",
                             "evidence": {}, "text": "explained first"},
                            {"kind": "differs", "got_index": 2, "want_index": 2, "cause": None,
                             "evidence": {"got": 0x401200, "want": 0x401300},
                             "text": "frame 2: fp 0x401200, cfi 0x401300"}]}


VERDICTS = (
    [agree("cfi"), agree("shadow")],
    [explained("cfi", "leaf-no-frame", "plt-stub"), agree("shadow")],
    [failure("cfi"), {"unwinder": "fp", "oracle": "shadow", "verdict": "not checked",
                      "reason": "no shadow stack", "divergences": []}],
)


def stack_log(end: bool = True) -> list[dict]:
    """One task, three kernel entries; each delivers a stack that gets a stack record (agree,
    explained by two causes, failure), then the end record written by EventLog.end."""
    fp = io.StringIO()
    log = EventLog(fp)
    current: list[list[int]] = [[]]
    delivered: dict = {}
    model = DeferredModel(mainline(), lambda t: current[0], log=log)

    def callback(work, trace, cookie):
        task = model.tasks[42]
        delivered.update(trace=list(trace), cookie=cookie, entry=task.entry, epoch=task.epoch)

    work = UnwindWork(callback, "perf")
    model.init(work)
    task = model.spawn(pid=42)
    for stack, verdicts in zip(STACKS, VERDICTS, strict=True):
        current[0] = stack
        model.enter_kernel(task)
        model.request(work, task, 0, Context(IRQ))
        model.return_to_user(task)
        trace = delivered["trace"]
        log.emit("stack", task=42, entry=delivered["entry"], epoch=delivered["epoch"], cookie=delivered["cookie"],
                 point="return_irq", comm="callchain-fp-sta", own="main",
                 regs={"ip": trace[0], "sp": 0x7FFE0000, "bp": 0x7FFE0010}, unwinder="fp",
                 frames={"fp": frames(trace), "cfi": frames(trace), "shadow": frames(trace)},
                 stops={"fp": "fp < sp (fp=0x0 sp=0x7ffe0100)", "cfi": "end of chain"},
                 verdicts=copy.deepcopy(verdicts))
    if end:
        log.end("complete", requests=3)
    return [json.loads(line) for line in fp.getvalue().splitlines()]


def text(events: list[dict]) -> list[str]:
    return relog(events)  # each line with its seq, the end record with its digest: the edit is checked


def index(events: list[dict], ev: str, n: int = 0) -> int:
    return [i for i, e in enumerate(events) if e["ev"] == ev][n]


def messages(events: list[dict]) -> list[str]:
    return check_lines(text(events)).messages()
