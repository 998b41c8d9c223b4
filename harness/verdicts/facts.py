"""The facts a run may have, which the causes of :mod:`.causes` may need (each cause's ``needs``).

A module of its own, importing nothing, so that what declares a program's facts
(:data:`harness.images.programs.PROGRAM_FACTS`) need not import the causes and, with them, the
oracles, the CFI tables and Capstone: ``harness --help`` and the light commands load it.
"""

from __future__ import annotations

__all__ = ["FACTS"]

# The facts about a run that a cause may need (each cause's ``needs``): what its tasks do and how
# they are sampled.  A cause that needs none arises wherever its oracle and unwinder judge (a
# sample in a prologue, in glibc without frame pointers, in the shadow stack's hooks: any program).
FACTS = {
    "execs": "a sampled task calls execve (forkexec, soak; perfcc and perf record start their target by "
             "fork + exec, and a sample in that window is on the replaced registers)",
    "exits": "a sampled task exits while it is sampled (perf: the target's last entry at the capture's end)",
    "signals": "the program runs signal handlers (a signal frame on its stack, rt_sigreturn)",
    "deep": "recursion deeper than the kernel's limits (perf_event_max_stack 127, UNWIND_MAX_ENTRIES 510)",
    "noreturn-calls": "our own code (with SFrame) ends a function with a call of a noreturn function",
    "stale-cfi": "the program's code has CFI rows that miss a move of rsp (Go's runtime: nanotime1 realigns rsp "
                 "for its vDSO call, or switches to g0's stack); a compiler's CFI follows every move",
    "interrupts": "requests by interrupt (NMI, timer): they may land in the kernel's entry assembly",
    "stack-buffers": "a syscall writes into a buffer on the user stack (wait4's status, clock_gettime's "
                     "timespec, an exec'd image's start-up) between a sample and the deferred walk",
    "defer": "perf sampled with defer_callchain: the kernel's deferred records are compared",
}
