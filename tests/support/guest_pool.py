"""One pool of booted guests per pytest worker (the ``guest_pool`` fixture of tests/conftest.py).

A guest boot costs about 3 s of a core on TCG (and a third of a second more of the harness's
set-up), about fifty a run (benchmarks/SUITE_TIME.md): the modules that boot the same guest
in-process take it from this pool and give it back, instead of booting their own.  A module
declares what it takes in ``POOL_GUESTS`` (GuestSpecs): the pool boots each kind of guest (the
spec without its programs: kernel, vCPUs, QEMU, ...) once per worker, with every program that
the collected modules declare for it, and checks it when it is given back (:meth:`GuestPool.unhealthy`):
a guest that fails the check (or whose user raised) is shut down and the next user gets a
fresh boot.  Tests that need a guest of their own (a panic, a killed QEMU, boot failures, the
CLI's own guests) keep booting theirs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib

from harness.images.qemu import choice_from_env
from harness.session import Session

#: Run in the guest by the check: every user process that is not busybox (/init, its shells and
#: forwarders) is a program the last user left running, and so is a `later` subshell still
#: sleeping before it starts one (images/init.sh; once its program ran, the subshell only waits
#: for the output forwarder).  Zombies have no exe link: gone already.
STRAY_PROGRAMS = ("for p in /proc/[0-9]*; do e=$(readlink $p/exe) || continue; "
                  "[ \"$e\" = /bin/busybox ] || echo \"${p#/proc/} $e\"; done; "
                  "for f in /tmp/.later.*; do [ -f \"$f\" ] || continue; p=$(cat $f); "
                  "for c in $(cat /proc/$p/task/$p/children 2>/dev/null); do "
                  "[ \"$(cat /proc/$c/comm 2>/dev/null)\" = sleep ] && echo \"later $p\"; done; done; true")


def qemu_choice(spec) -> str | tuple[str, ...]:
    """The QEMU a spec asks for, by name (None is $HARNESS_QEMU or the default's name)."""
    choice = choice_from_env() if spec.qemu is None else spec.qemu
    return choice if isinstance(choice, str) else tuple(choice)


def pool_key(spec) -> tuple:
    """A guest's kind: every field of its spec but the programs in its initramfs (QEMU None and
    the default's name are one QEMU).  Every field, so that one GuestSpec gains (``rt`` did)
    is a kind of its own without a change here."""
    key = []
    for f in dataclasses.fields(spec):
        if f.name in ("programs", "user_programs", "libs"):
            continue
        value = qemu_choice(spec) if f.name == "qemu" else getattr(spec, f.name)
        key.append((f.name, tuple(sorted(value.items())) if isinstance(value, dict) else value))
    return tuple(key)


class GuestPool:
    """Booted :class:`harness.session.Session`\\ s by kind, each used by one user at a time."""

    def __init__(self, declared):
        self._union = {}  # kind -> the spec it boots with: every declared program of that kind
        for spec in declared:
            key = pool_key(spec)
            union = self._union.setdefault(key, dataclasses.replace(spec, programs=[], user_programs=[], libs=[]))
            union.programs += [p for p in spec.programs if p not in union.programs]
            union.libs += [p for p in spec.libs if p not in union.libs]
            union.user_programs += [p for p in spec.user_programs if p not in union.user_programs]
        self._idle = {}  # kind -> Session, stopped, checked
        self.boots = 0
        self.reuses = 0
        self.discarded: list[str] = []  # why, for each guest shut down at its return

    def spec_for(self, spec):
        """The spec the pool boots for ``spec``'s kind; an error if ``spec`` was not declared."""
        union = self._union.get(pool_key(spec))
        missing = [] if union is None else ([p for p in spec.programs if p not in union.programs]
                                            + [p for p in spec.user_programs if p not in union.user_programs]
                                            + [p for p in spec.libs if p not in union.libs])
        if union is None or missing:
            raise AssertionError(f"a pooled guest was not declared in its module's POOL_GUESTS: {spec} "
                                 f"(missing {missing or 'the whole kind'})")
        return union

    @contextlib.contextmanager
    def take(self, spec):
        """A booted, stopped guest of ``spec``'s kind with at least ``spec``'s programs."""
        union = self.spec_for(spec)
        key = pool_key(spec)
        sess = self._idle.pop(key, None)
        if sess is None:
            sess = Session(union).start()  # raises (and closes) on a failed boot
            self.boots += 1
        else:
            self.reuses += 1
        why = "its user raised"
        try:
            yield sess
            why = self.unhealthy(sess)
        finally:
            if why is None and key not in self._idle:
                self._idle[key] = sess
            else:
                self.discarded.append(why or "a second guest of its kind")
                sess.close()

    def idle(self, spec):
        """The guest of ``spec``'s kind that the next :meth:`take` would hand out, or None (it boots)."""
        return self._idle.get(pool_key(spec))

    @staticmethod
    def unhealthy(sess) -> str | None:
        """Why ``sess`` may not go to the next user, or None: QEMU alive and its kernel too, its
        channels open, stopped (as :meth:`Session.start` leaves it), no breakpoint left in, no
        read guesses left, and no program of the last user still running in the guest."""
        m, t = sess.machine, sess.target
        if m is None or t is None or not m.alive():
            return "QEMU is gone"
        if m.console.panic is not None:
            return f"the guest's kernel died: {m.console.panic}"
        if m.console.eof or m.control.eof or m.output.eof:
            return "a channel of the guest is closed"
        if t.running:
            return "left running"
        if t.breakpoints:
            return f"{len(t.breakpoints)} breakpoint(s) left in"
        if sess.expected_reads:
            return f"read guesses left: {list(sess.expected_reads)}"
        try:
            t.resume()
            status, out = m.shell_output(STRAY_PROGRAMS, timeout=30)
            t.interrupt()
        except Exception as exc:  # any failure of the guest or its stub: not for the next user
            return f"the check failed: {type(exc).__name__}: {exc}"
        if status != 0 or out.strip():
            return f"programs still running (status {status}): {out.decode(errors='replace').strip()}"
        return None

    def close(self) -> None:
        while self._idle:
            self._idle.popitem()[1].close()


def declared_pool_guests(items) -> list:
    modules = {id(m): m for m in (getattr(item, "module", None) for item in items) if m is not None}
    return [spec for m in modules.values() for spec in getattr(m, "POOL_GUESTS", ())]


def pool_group(spec) -> str:
    """The xdist group of the tests that take a guest of ``spec``'s kind from the pool."""
    qemu = qemu_choice(spec)
    digest = hashlib.sha256(repr(pool_key(spec)).encode()).hexdigest()[:8]
    return f"pool:{spec.kernel}-smp{spec.smp}-{qemu if isinstance(qemu, str) else 'custom'}-{digest}"
