"""Where deferred work is delivered: the return points, defined once (harness/kernel/stops.py)."""

from __future__ import annotations

from harness.kernel.stops import RETURN_POINTS, StopPoint, StopPoints, delivery_points


def _points(names, missing=()):
    pts = {n: StopPoint(n, 0x1000 * (i + 1), "exit" if n == "exit" else "return", "rsp", f"test {n}")
           for i, n in enumerate(names)}
    return StopPoints(pts, {n: "not in this kernel" for n in missing})


def test_every_return_point_exit_and_get_signal():
    stops = _points([*RETURN_POINTS, "exit", "nmi"])
    got = delivery_points(stops, {"get_signal": 0x9000, "do_exit": 0x8000})
    assert [p.name for p in got.values()] == [*RETURN_POINTS, "exit", "get_signal"]
    assert got[0x9000] == StopPoint("get_signal", 0x9000, "return", "task", "symbol get_signal")
    assert all(addr == p.addr for addr, p in got.items())


def test_without_exit_or_signal_and_with_points_missing():
    stops = _points(["return_irq", "return_syscall64", "exit"], missing=["return_syscall32", "return_sysenter32"])
    assert [p.name for p in delivery_points(stops, {"get_signal": 0x9000}, with_exit=False,
                                            with_signal=False).values()] == ["return_syscall64", "return_irq"]
    assert [p.name for p in delivery_points(stops, {}).values()] == ["return_syscall64", "return_irq", "exit"]
