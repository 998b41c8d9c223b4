"""Which kernel revision of ``unwind_deferred`` the model follows: a :class:`Profile`.

A profile is data plus a few small strategy functions; the model (``model.py``) is written once and
asks the profile where the revisions differ.  Two profiles are provided:

``seed-v10``
    The v10 series (June 2025, ``[PATCH v10 00/14] unwind_user: x86: Deferred unwinding
    infrastructure``), patches 07 (NMI-safe requests), 10 (``unwind: Clear unwind_mask on exit
    back to user space``) and 11 (``unwind: Finish up unwind when a task exits``):

    * ``UNWIND_PENDING_BIT = BITS_PER_LONG - 1`` is the one reserved bit: 63 / 31 tracers;
    * the cookie is a ``local_clock()`` timestamp.  In v10 it is *not* assigned with a cmpxchg
      (that came in v11): ``get_timestamp()`` does ``WRITE_ONCE(info->timestamp, local_clock())``
      and an NMI writes ``info->nmi_timestamp`` instead, which the interrupted request (or the task
      work) folds into ``timestamp``;
    * ``unwind_deferred_request()`` returns 0, ``UNWIND_ALREADY_PENDING`` (1) or
      ``UNWIND_ALREADY_EXECUTED`` (2); the first request after the callbacks ran claims the mask
      with ``cmpxchg(old -> PENDING | bit)``, dropping the bits whose callbacks already ran, so a
      tracer can be called a second time in the same entry (documented in v10's kernel-doc);
    * NMI requests take a separate path, ``unwind_deferred_request_nmi()``;
    * ``UNWIND_MAX_ENTRIES`` is 512 (``#define UNWIND_MAX_ENTRIES 512`` in patch 04);
    * the callback list is walked under SRCU (v10 patch 09, ``Use SRCU
      unwind_deferred_task_work()``); ``init``/``cancel`` take ``callback_mutex``.

``mainline``
    ``kernel/unwind/deferred.c`` as merged (6.17, with the 6.18/6.19 follow-ups):

    * ``UNWIND_PENDING_BIT = 0`` and ``UNWIND_USED_BIT = 1`` are reserved: 62 / 30 tracers;
    * the cookie is ``union unwind_task_id { struct { u32 cpu; u32 cnt; }; u64 id; }``: on a
      little-endian machine (x86) ``cpu = smp_processor_id() + 1`` is the LOW 32 bits and
      ``cnt = (per-CPU unwind_ctx_ctr + 2) | 1`` the HIGH 32 bits (``get_cookie()``);
    * ``unwind_deferred_request()`` returns 1 whenever the tracer's bit is already set in
      ``info->unwind_mask``, which stays set after its callback ran until ``unwind_reset_info()``;
      ``cache->unwind_completed`` keeps a callback from running twice in one entry;
    * ``UNWIND_MAX_ENTRIES = (SZ_4K - sizeof(struct unwind_cache)) / sizeof(long)``: 510 on 64-bit,
      1022 on 32-bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

# include/uapi/asm-generic/errno-base.h
EBUSY = 16
EINVAL = 22

# include/linux/sched.h
PF_EXITING = 0x00000004
PF_KTHREAD = 0x00200000

# What a claim step decided (see Profile.claim).
QUEUE = "queue"  # this request claimed PENDING: it must call task_work_add()
RETURN = "return"  # the request is done and returns Claim.ret


@dataclass(frozen=True)
class Claim:
    """Result of the atomic read-modify-write of ``info->unwind_mask`` in a request."""

    new_mask: int
    action: str
    ret: int = 0


def c_int(value: int) -> int:
    """The C conversion of an ``unsigned long`` to the function's ``int`` return value."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def _already_v10(old: int, pending: int) -> int:
    """v10 ``unwind_deferred_request``: ``old & PENDING ? UNWIND_ALREADY_PENDING : UNWIND_ALREADY_EXECUTED``."""
    return 1 if old & pending else 2


def _already_mainline(old: int, pending: int) -> int:
    """mainline ``unwind_deferred_request``: ``if (old & bit) return 1;`` (queued or executed)."""
    return 1


def _claim_v10(mask: int, old: int, pending: int, bit: int) -> Claim:
    """v10: ``if (unwind_pending(info)) goto out;`` then ``try_cmpxchg(&mask, &old, PENDING | bit)``.

    ``out:`` is ``return test_and_set_bit(bit, &mask) ? UNWIND_ALREADY_PENDING : 0``.  A successful
    cmpxchg *replaces* the mask, dropping the bits of tracers whose callbacks already ran.
    """
    if mask & pending or mask != old:
        return Claim(mask | bit, RETURN, 1 if mask & bit else 0)
    return Claim(pending | bit, QUEUE)


def _claim_mainline(mask: int, old: int, pending: int, bit: int) -> Claim:
    """mainline: ``old = atomic_long_fetch_or(PENDING | bit, &mask); if (old & bits) return old & bit;``.

    The kernel returns ``old & bit`` converted to ``int``, not ``!!(old & bit)``: 0 when nothing
    was set, ``BIT(bit)`` truncated to 32 bits otherwise (a nested request of the same tracer set it).
    """
    bits = pending | bit
    if mask & bits:
        return Claim(mask | bits, RETURN, c_int(mask & bit))
    return Claim(mask | bits, QUEUE)


@dataclass(frozen=True)
class Profile:
    name: str
    word_bits: int  # BITS_PER_LONG: 64 or 32
    pending_bit: int  # UNWIND_PENDING_BIT
    used_bit: int | None  # UNWIND_USED_BIT (mainline only)
    max_entries: int  # UNWIND_MAX_ENTRIES
    cookie_scheme: str  # "timestamp" (v10) or "cpu_counter" (mainline get_cookie)
    already: Callable[[int, int], int]  # return value when the tracer's bit is already set
    claim: Callable[[int, int, int, int], Claim]  # the atomic claim of the mask
    nmi_separate_path: bool  # v10 unwind_deferred_request_nmi()
    completed_mask: bool  # mainline cache->unwind_completed
    once_per_entry: bool  # a tracer's callback runs at most once per entry

    @property
    def pending(self) -> int:
        return 1 << self.pending_bit

    @property
    def used(self) -> int:
        return 0 if self.used_bit is None else 1 << self.used_bit

    @property
    def reserved(self) -> int:
        """``RESERVED_BITS``: the bits of the global mask that no tracer can take."""
        return self.pending | self.used

    @property
    def full_mask(self) -> int:
        return (1 << self.word_bits) - 1

    @property
    def max_tracers(self) -> int:
        return self.word_bits - bin(self.reserved).count("1")

    def with_max_entries(self, n: int) -> Profile:
        """The same revision with another ``UNWIND_MAX_ENTRIES`` (e.g. 512 of early revisions)."""
        return replace(self, max_entries=n)


def seed_v10(word_bits: int = 64) -> Profile:
    return Profile(
        name="seed-v10",
        word_bits=word_bits,
        pending_bit=word_bits - 1,
        used_bit=None,
        max_entries=512,
        cookie_scheme="timestamp",
        already=_already_v10,
        claim=_claim_v10,
        nmi_separate_path=True,
        completed_mask=False,
        once_per_entry=False,
    )


def mainline(word_bits: int = 64) -> Profile:
    long_size = word_bits // 8
    # struct unwind_cache { unsigned long unwind_completed; unsigned int nr_entries; unsigned long entries[]; }
    header = long_size + 4
    header += (-header) % long_size  # entries[] is long-aligned
    return Profile(
        name="mainline",
        word_bits=word_bits,
        pending_bit=0,
        used_bit=1,
        max_entries=(4096 - header) // long_size,
        cookie_scheme="cpu_counter",
        already=_already_mainline,
        claim=_claim_mainline,
        nmi_separate_path=False,
        completed_mask=True,
        once_per_entry=True,
    )


PROFILES: dict[str, Callable[[int], Profile]] = {"seed-v10": seed_v10, "mainline": mainline}


def get_profile(name: str, word_bits: int = 64) -> Profile:
    try:
        return PROFILES[name](word_bits)
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; known: {', '.join(PROFILES)}") from None


#: How many cookies one CPU gives before they repeat (mainline ``get_cookie()``): ``cnt = (ctr +
#: 2) | 1`` in a u32 takes the 2^31 odd values, then wraps.  A task whose entries outlast that
#: many requests on its CPU would get a cookie an earlier entry had: the kernel's own wrap, which
#: the checker's rule "no two epochs of one task share a cookie" (check.py) would report.  The
#: bound of a run's requests (harness/scenarios/engine.py MAX_SAMPLES) comes from here.
COOKIES_PER_CPU = 1 << 31


def cookie_fields(cookie: int) -> tuple[int, int]:
    """Split a mainline cookie into ``(cpu + 1, cnt)``: cpu is the low half on little-endian x86."""
    return cookie & 0xFFFFFFFF, cookie >> 32
