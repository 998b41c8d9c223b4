"""The resolve table ``harness perf --save`` writes beside a capture (``FILE.resolve.json``)."""

from __future__ import annotations

import json

from .records import PerfFormatError

__all__ = ["load_resolve"]


def load_resolve(text: str, source: str = "resolve.json") -> dict[str, str | None]:
    """The table ``--save`` writes beside a capture (``FILE.resolve.json``): a JSON object from
    guest paths to host paths (or null where the guest file has no host copy).  Anything else
    raises :class:`~harness.perfparse.records.PerfFormatError` naming what is wrong."""
    try:
        table = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PerfFormatError(f"{source} is not JSON ({exc.msg})", field="resolve", offset=exc.pos) from None
    except RecursionError:
        raise PerfFormatError(f"{source} nests too deep to be a resolve table", field="resolve", offset=0) from None
    if not isinstance(table, dict):
        raise PerfFormatError(f"{source} holds a JSON {type(table).__name__}, not an object of guest path: host path",
                              field="resolve", offset=0)
    for guest, host in table.items():
        if not isinstance(host, str) and host is not None:
            raise PerfFormatError(f"{source}: the host path of {guest!r} is {host!r}, not a string or null",
                                  field="resolve", offset=0)
        if host is not None and "\0" in host:
            raise PerfFormatError(f"{source}: the host path of {guest!r} holds a NUL byte", field="resolve", offset=0)
    return table
