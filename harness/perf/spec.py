"""What ``perfcc`` is asked to record (:class:`PerfSpec`): a module that imports nothing of the
harness, so that ``harness perf``'s and ``harness bench``'s parsers take its defaults without
loading the capture, the session and the oracles."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PerfSpec"]


@dataclass(frozen=True)
class PerfSpec:
    seconds: float = 3.0
    freq: int = 200  # samples per second of the software clock
    stack_bytes: int = 16384  # sample_stack_user (the kernel caps it at TASK_SIZE - sp)
    defer: bool = False  # defer_callchain + defer_output (6.19+)
    clock: str = "cpu"  # "cpu" (PERF_COUNT_SW_CPU_CLOCK) or "task" (TASK_CLOCK)
    data_pages: int = 256  # ring buffer pages per CPU (a power of two)
    inherit: bool = True  # one inherited event per CPU; False: one cpu = -1 event on the child only

    def argv(self, perfcc: str, out: str, target: list[str]) -> list[str]:
        a = [perfcc, "-o", out, "-s", f"{self.seconds:g}", "-F", str(self.freq), "-S", str(self.stack_bytes),
             "-p", str(self.data_pages)]
        a += ["-t"] if self.clock == "task" else []
        a += ["-d"] if self.defer else []
        a += [] if self.inherit else ["-1"]
        return [*a, "--", *target]
