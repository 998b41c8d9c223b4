"""Test gating in one place.

Tests marked ``qemu`` boot real guests.  Where QEMU, GDB or the images are missing they are
skipped with a readable reason, except in CI (``CI`` set) or with ``HARNESS_REQUIRE_QEMU=1``,
where a missing piece is a failure: a green CI must never hide a missing install step.
"""

from __future__ import annotations

import contextlib
import os
import shutil

import pytest
from hypothesis import settings

# "ci": more examples for every property test; the deferred stateful test takes 2,000 of its
# own under this profile (tests/support/deferred_settings.py).
settings.register_profile("ci", max_examples=500, deadline=None)
settings.register_profile("dev", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

REQUIRED_TOOLS = ("qemu-system-x86_64", "gdb", "socat", "busybox", "debootstrap", "zstd")


def strict() -> bool:
    return bool(os.environ.get("CI")) or os.environ.get("HARNESS_REQUIRE_QEMU") == "1"


def require(condition: bool, reason: str) -> None:
    """Skip (locally) or fail (in CI) when ``condition`` does not hold."""
    if condition:
        return
    if strict():
        pytest.fail(f"required for this test and missing: {reason}", pytrace=False)
    pytest.skip(reason)


def pytest_runtest_setup(item):
    if item.get_closest_marker("qemu"):
        missing = [t for t in REQUIRED_TOOLS if shutil.which(t) is None]
        require(not missing, f"tools not installed: {', '.join(missing)} (run ./dev test)")


# --- pytest-xdist (tox -e qemu runs `-n 2 --dist loadgroup`) ---------------------------------
# A test marked ``pool_guest(spec)`` takes its guest from the worker's pool (below): all the tests
# of one kind of guest get one group, so it boots once per session on one worker; the kinds (the
# default guest, 2 vCPUs, 6.1, ...) balance across the workers.
# A QEMU module whose guest is a module-scoped fixture must run on one worker, or each worker
# would boot that guest again: every such test gets the xdist_group of its module and of the
# values of its module's module-scoped parameters (test_engine.py's guests, test_platform.py's
# kernels), so two guests of one module can still run on two workers.  Tests without one
# (each boots its own guest, or runs the CLI) are spread one by one.  Without xdist the marker
# does nothing.


def _guest_group(item) -> str | None:
    module = item.getparent(pytest.Module)
    if module is None:
        return None
    shared = {name for name, defs in item._fixtureinfo.name2fixturedefs.items()
              if defs and defs[-1].scope in ("module", "package", "session") and defs[-1].baseid == module.nodeid}
    if not shared:
        return None
    params = getattr(item, "callspec", None)
    values = [f"{name}={params.params[name]}" for name in sorted(shared) if params and name in params.params]
    return "|".join([module.nodeid, *values])


def pool_group(spec) -> str:
    """The xdist group of the tests that take a guest of ``spec``'s kind from the pool."""
    import hashlib

    qemu = _qemu_choice(spec)
    digest = hashlib.sha256(repr(pool_key(spec)).encode()).hexdigest()[:8]
    return f"pool:{spec.kernel}-smp{spec.smp}-{qemu if isinstance(qemu, str) else 'custom'}-{digest}"


def pytest_itemcollected(item):
    if item.get_closest_marker("qemu") and not item.get_closest_marker("xdist_group"):
        # A test that takes a guest from the pool (tests/qemu: ``pool_guest(GuestSpec)``) runs
        # where the other tests of that kind of guest run: one boot of it for the session.
        pooled = item.get_closest_marker("pool_guest")
        group = pool_group(pooled.args[0]) if pooled else _guest_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """An xdist worker tells the controller an item's group by the suffix ``@GROUP`` of the node
    id it reports.  pytest-xdist 3.8 (the latest) sets it through ``Item._nodeid``, which pytest
    9.2 no longer reads (``Node._id``, a ``NodeId``): loadgroup then ran every test on its own
    and both workers booted a module's guest (measured: most module-scoped guests were set
    up twice).  Done here where xdist's did not take."""
    if not getattr(config.option, "loadgroup", False):  # set in xdist's workers only
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names and "@" not in item.nodeid and hasattr(item, "_id"):
            item._id = type(item._id).parse(f"{item.nodeid}@{'_'.join(names)}")



# --- one pool of guests per worker ---------------------------------------------------------
# A guest boot costs about 3 s of a core on TCG (and a third of a second more of the harness's
# set-up), about fifty a run (benchmarks/SUITE_TIME.md): the modules that boot the same guest
# in-process take it from this pool and give it back, instead of booting their own.  A module
# declares what it takes in ``POOL_GUESTS`` (GuestSpecs): the pool boots each kind of guest (the
# spec without its programs: kernel, vCPUs, QEMU, ...) once per worker, with every program that
# the collected modules declare for it, and checks it when it is given back (:meth:`unhealthy`):
# a guest that fails the check (or whose user raised) is shut down and the next user gets a
# fresh boot.  Tests that need a guest of their own (a panic, a killed QEMU, boot failures, the
# CLI's own guests) keep booting theirs.

#: Run in the guest by the check: every user process that is not busybox (/init, its shells and
#: forwarders) is a program the last user left running, and so is a `later` subshell still
#: sleeping before it starts one (images/init.sh; once its program ran, the subshell only waits
#: for the output forwarder).  Zombies have no exe link: gone already.
STRAY_PROGRAMS = ("for p in /proc/[0-9]*; do e=$(readlink $p/exe) || continue; "
                  "[ \"$e\" = /bin/busybox ] || echo \"${p#/proc/} $e\"; done; "
                  "for f in /tmp/.later.*; do [ -f \"$f\" ] || continue; p=$(cat $f); "
                  "for c in $(cat /proc/$p/task/$p/children 2>/dev/null); do "
                  "[ \"$(cat /proc/$c/comm 2>/dev/null)\" = sleep ] && echo \"later $p\"; done; done; true")


def _qemu_choice(spec) -> str | tuple[str, ...]:
    """The QEMU a spec asks for, by name (None is $HARNESS_QEMU or the default's name)."""
    from harness.images.qemu import choice_from_env

    choice = choice_from_env() if spec.qemu is None else spec.qemu
    return choice if isinstance(choice, str) else tuple(choice)


def pool_key(spec) -> tuple:
    """A guest's kind: every field of its spec but the programs in its initramfs (QEMU None and
    the default's name are one QEMU).  Every field, so that one GuestSpec gains (``rt`` did)
    is a kind of its own without a change here."""
    import dataclasses

    key = []
    for f in dataclasses.fields(spec):
        if f.name in ("programs", "user_programs"):
            continue
        value = _qemu_choice(spec) if f.name == "qemu" else getattr(spec, f.name)
        key.append((f.name, tuple(sorted(value.items())) if isinstance(value, dict) else value))
    return tuple(key)


class GuestPool:
    """Booted :class:`harness.session.Session`\\ s by kind, each used by one user at a time."""

    def __init__(self, declared):
        import dataclasses

        self._union = {}  # kind -> the spec it boots with: every declared program of that kind
        for spec in declared:
            key = pool_key(spec)
            union = self._union.setdefault(key, dataclasses.replace(spec, programs=[], user_programs=[]))
            union.programs += [p for p in spec.programs if p not in union.programs]
            union.user_programs += [p for p in spec.user_programs if p not in union.user_programs]
        self._idle = {}  # kind -> Session, stopped, checked
        self.boots = 0
        self.reuses = 0
        self.discarded: list[str] = []  # why, for each guest shut down at its return

    def spec_for(self, spec):
        """The spec the pool boots for ``spec``'s kind; an error if ``spec`` was not declared."""
        union = self._union.get(pool_key(spec))
        missing = [] if union is None else ([p for p in spec.programs if p not in union.programs]
                                            + [p for p in spec.user_programs if p not in union.user_programs])
        if union is None or missing:
            raise AssertionError(f"a pooled guest was not declared in its module's POOL_GUESTS: {spec} "
                                 f"(missing {missing or 'the whole kind'})")
        return union

    @contextlib.contextmanager
    def take(self, spec):
        """A booted, stopped guest of ``spec``'s kind with at least ``spec``'s programs."""
        from harness.session import Session

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


def _declared_pool_guests(items) -> list:
    modules = {id(m): m for m in (getattr(item, "module", None) for item in items) if m is not None}
    return [spec for m in modules.values() for spec in getattr(m, "POOL_GUESTS", ())]


@pytest.fixture(scope="session")
def guest_pool(request):
    """This worker's pool of guests: ``with guest_pool.take(GuestSpec(...)) as session:``."""
    pool = GuestPool(_declared_pool_guests(request.session.items))
    try:
        yield pool
    finally:
        pool.close()
        if pool.boots:
            print(f"\nguest pool: {pool.boots} boot(s), {pool.reuses} reuse(s), "
                  f"{len(pool.discarded)} discarded: {pool.discarded}")
