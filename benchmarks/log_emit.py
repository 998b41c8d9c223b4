"""EventLog.emit's cost a record and a trace, on the records of a real log, without a file (as
bench deferred writes them): the log writer's part of a trace's CPU, the same records for two
trees.  A log from ``harness run fp-syscall --samples 200 --out DIR`` (12 records a trace):

    PYTHONPATH=. .venv/bin/python benchmarks/log_emit.py DIR/fp-syscall.jsonl
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log")
    args = ap.parse_args(argv)

    from harness.deferred.log import EventLog, read_events

    with open(args.log) as f:
        events = list(read_events(f))
    body = [(e["ev"], {k: v for k, v in e.items() if k not in ("seq", "ev", "line")})
            for e in events if e["ev"] != "end"]
    traces = max(sum(e["ev"] == "stack" for e in events), 1)

    def run() -> None:
        log = EventLog(None, keep=True)
        for ev, fields in body:
            log.emit(ev, **fields)

    times = []
    for _ in range(9):
        t0 = time.process_time()
        run()
        times.append(time.process_time() - t0)
    best = min(times)
    print(f"{len(body)} records, {traces} stacks: emit {1e6 * best / len(body):.2f} us a record, "
          f"{1e6 * best / traces:.1f} us a trace (the best of 9, CPU time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
