"""The text of ``harness bench``: each benchmark's figures (:mod:`harness.bench`, the deferred
sampling run) as lines."""

from __future__ import annotations

__all__ = ["HARNESS_MS_GOAL", "deferred_lines", "harness_ms", "sframe_line", "transport_table", "unwind_line"]


def unwind_line(r: dict) -> str:
    """One line of :func:`harness.bench.unwind.bench_fp` / ``bench_mixed``'s figures."""
    return (f"{r['name']}: {r['frames_per_s']:,.0f} frames/s ({r['walks']} walks of {r['depth']} frames "
            f"in {r['seconds']:.2f}s)")


def sframe_line(r: dict, what: str) -> str:
    """:func:`harness.bench.sframe.bench_lookups`'s figures, on one line."""
    return f"sframe lookups ({what}): " + ", ".join(
        f"{k}={v:,.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items())


def transport_table(result: dict) -> str:
    """Side-by-side table of :func:`harness.bench.transport.bench_transport`'s result."""
    kinds = list(result["transports"])
    rows = [
        ("attach (ms)", lambda r: r["attach_ms"]),
        ("stops/s", lambda r: r["stops_per_s"]),
        ("stop p50 (ms)", lambda r: r["stop_ms"]["p50"]),
        ("stop p90 (ms)", lambda r: r["stop_ms"]["p90"]),
        ("read 8 B p50 (ms)", lambda r: r["read8_ms"]["p50"]),
        ("read 8 B p90 (ms)", lambda r: r["read8_ms"]["p90"]),
        ("read 4 KiB p50 (ms)", lambda r: r["read4k_ms"]["p50"]),
        ("read 4 KiB p90 (ms)", lambda r: r["read4k_ms"]["p90"]),
    ]
    width = max(len(label) for label, _ in rows)
    head = f"{'':<{width}}" + "".join(f"{k:>12}" for k in kinds)
    title = (f"transport benchmark: {result['n_stops']} stops at {result['breakpoint']:#x} "
             f"(do_syscall_64), {result['n_reads']} reads each, {result['cpus']} vCPUs")
    lines = [title, head]
    for label, get in rows:
        cells = []
        for k in kinds:
            v = get(result["transports"][k])
            cells.append(f"{v:>12.1f}" if v >= 10 else f"{v:>12.3f}")
        lines.append(f"{label:<{width}}" + "".join(cells))
    return "\n".join(lines)


#: the harness's own time a trace that bench deferred holds itself to (issue 37): at most 0.3 ms
#: beyond the trace's two stops, which puts it at the guest kernel's own deferred rate where the
#: floor is 2,800 stops/s
HARNESS_MS_GOAL = 0.3


def harness_ms(rate: float, floor: float) -> float | None:
    """The harness's own time a trace in ms: 1/(traces/s) - 2/floor, what a trace takes beyond
    the two stops (its request and its delivery) QEMU's own stop loop would take.  None when a
    figure is missing."""
    if rate <= 0 or floor <= 0:
        return None
    return 1000 * (1 / rate - 2 / floor)


def deferred_lines(r, floor: float, kernel, kernel_why: str, perf_freq: int, cost, overlap: dict) -> list[str]:
    """``harness bench deferred``'s figures: the sampling run's result ``r``
    (:class:`harness.scenarios.result.Result`), the raw stop rate ``floor``, the guest kernel's
    own deferred rate (:class:`harness.perf.rate.DeferredRate`, or None and why not), the
    sampling loop's cost (:class:`harness.scenarios.engine.LoopCost`: CPU, stub packets and
    round trips, log records) and the engine's overlap counters."""
    rate = r.stacks / r.loop_seconds if r.loop_seconds else 0.0
    n = max(r.stacks, 1)
    goal = 0.8 * floor / 2
    own = harness_ms(rate, floor)
    lines = [f"error in the sampling run: {e}" for e in r.errors + r.problems]
    lines.append(f"raw stop rate (floor):        {floor:8.1f} stops/s")
    if kernel is not None:
        lines.append(f"guest kernel's deferred rate: {kernel.per_second:8.1f} deferred callchains/s "
                     f"({kernel.deferred} in {kernel.seconds:.1f}s; perf at {perf_freq} Hz with defer_callchain: "
                     f"{kernel.samples} samples, {kernel.cookies} with a cookie)")
    else:
        lines.append(f"guest kernel's deferred rate:      n/a ({kernel_why})")
    lines.append(f"requests on the program:      {r.sampled:8d} of {r.scenario.samples} asked for")
    lines.append(f"deferred traces delivered:    {rate:8.1f} traces/s ({r.stacks} traces in {r.loop_seconds:.1f}s)")
    if own is not None and own <= 0:
        # QEMU 7.2: its raw stop loop (a plain breakpoint stop after another) is slower than a
        # trace's two stops (every stop flushes the translations; 229 stops/s against 326 in the
        # traces, 2026-12-07), so 2/floor overstates them and the difference means nothing
        lines.append(f"harness time a trace:         {own:8.3f} ms -> not measured here: the floor "
                     f"({floor:.1f} stops/s) is below the traces' own stops ({rate * r.stops / n:.1f}/s), so "
                     f"2/floor is no bound on a trace's stops")
        own = None
    elif own is not None:
        lines.append(f"harness time a trace:         {own:8.3f} ms (1/(traces/s) - 2/floor: a trace's time "
                     f"beyond its two stops)")
    else:
        lines.append("harness time a trace:              n/a (no traces or no floor)")
    if kernel is not None and kernel.per_second > 0:
        lines.append(f"of the kernel's rate:         {rate / kernel.per_second:8.2f} (traces/s over the guest "
                     f"kernel's deferred callchains/s)")
    else:
        lines.append("of the kernel's rate:              n/a (no kernel rate)")
    lines.append(f"harness CPU a trace:          {1000 * cost.cpu / n:8.3f} ms (the process's CPU time over the "
                 f"sampling loop: {cost.cpu:.2f}s for {r.stacks} traces)")
    lines.append(f"stops per trace:              {r.stops / n:8.2f}")
    lines.append(f"NMI stops left at once:       {r.continued:8d} (passed over, their guesses missed: {r.passed_over})")
    if cost.round_trips is not None:
        lines.append(f"stub round trips per trace:   {cost.round_trips / n:8.2f}")
    if cost.packets:
        kinds = ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(cost.packets.items(), key=lambda kv: (-kv[1], kv[0])))
        lines.append(f"stub packets per trace:       {sum(cost.packets.values()) / n:8.2f} ({kinds})")
    lines.append(f"log records per trace:        {cost.records / n:8.2f}")
    if overlap["deliveries"]:
        lines.append(f"checks while the guest runs:  {1000 * overlap['seconds'] / overlap['deliveries']:8.2f} ms per "
                     f"delivery; the next stop was already waiting after {overlap['late']} of {overlap['deliveries']}")
    lines.append(f"goal harness time a trace:    {HARNESS_MS_GOAL:8.3f} ms -> "
                 + ("not judged (no harness time)" if own is None else 'met' if own <= HARNESS_MS_GOAL else 'NOT met'))
    lines.append(f"goal 0.8 * floor / 2:         {goal:8.1f} traces/s -> {'met' if rate >= goal else 'NOT met'}"
                 f" ({rate / goal if goal else 0:.2f} of it; the former goal)")
    lines += [f"note: {note}" for note in r.notes]  # why a run fell short of its requests, among others
    if not (r.errors or r.problems) and (r.failed_stacks or r.invariant_violations):
        lines.append(f"failed stacks in the sampling run: {r.failed_stacks}; invariant violations: "
                     f"{len(r.invariant_violations)}")
    return lines
