"""``harness kernel-diff``'s defaults (and ``harness run --kernel-diff``'s): requests of the
kernel's tracer per scenario, perf's sampling frequency, the model's profile, differences shown,
the scenarios.  A module that imports nothing, so that the command's parser takes them without
loading the driver (the session, the transports)."""

from __future__ import annotations

__all__ = ["DEFAULT_FREQ", "DEFAULT_PROFILE", "DEFAULT_SAMPLES", "DEFAULT_SCENARIOS", "DEFAULT_SHOW"]

DEFAULT_SAMPLES = 300
DEFAULT_FREQ = 200
DEFAULT_PROFILE = "mainline"
DEFAULT_SHOW = 20
DEFAULT_SCENARIOS = ("fp-spin", "fp-syscall", "threads", "forkexec", "compat-fp")
