"""The child process of :func:`harness.campaign.isolate.call`:
``python -m harness.campaign.child TASK.pkl RESULT.pkl``.  Runs the pickled ``(fn, args)`` with
the harness's signal handling (SIGTERM ends it as Ctrl-C does: its guest shut down) and writes
``(True, result)`` or ``(False, exception)``; nothing when it was interrupted."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    import cloudpickle

    from ..signals import handling
    spec, out = Path(argv[0]), Path(argv[1])
    fn, args = pickle.loads(spec.read_bytes())
    with handling():
        try:
            value = (True, fn(*args))
        except KeyboardInterrupt:
            return 130
        except Exception as exc:  # noqa: BLE001 -- the task's error goes back to its caller
            value = (False, exc)
    try:
        data = cloudpickle.dumps(value)
    except Exception as exc:  # noqa: BLE001 -- an exception that does not pickle: its text
        data = cloudpickle.dumps((False, RuntimeError(f"{type(value[1]).__name__}: {value[1]} ({exc})")))
    tmp = out.with_suffix(".part")
    tmp.write_bytes(data)
    tmp.rename(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
