"""pytest plugin: your own binaries' user stacks, unwound on a real guest and checked by the oracles.

Installed with the package (entry point ``pytest11: unwind_harness``); without the installed entry
point, load it with ``-p harness.pytest_plugin`` or ``pytest_plugins = ["harness.pytest_plugin"]``.

Fixtures
    ``unwind_run``    (function) ``unwind_run(path, args=(), samples=None, libs=(), **scenario_fields)``
                      samples a host binary (with ``libs``, the libraries it dlopens: the
                      command line's ``--lib``) on a guest and returns its
                      :class:`harness.scenarios.result.Result`; ``unwind_run.source(name, args=None,
                      variant=Variant(), toolchain=None, ...)`` does the same for a guest program
                      built from ``guest_programs/NAME.c`` with the test's toolchain.  Each run's
                      JSONL log is written under the test's ``tmp_path`` (``unwind_run.logs``).
    ``unwind_guest``  (session) a factory ``unwind_guest(programs=(), sources=(), kernel=None,
                      qemu=None, smp=None, libs=()) -> Session``: a booted guest carrying those programs,
                      cached for the test session and closed at its end.
    ``unwind_kernel`` (session), ``unwind_toolchain`` (function): the kernel and toolchain
                      of this test: the marker's parameter, else the option.

Marker
    ``@pytest.mark.unwind(kernels=[...], toolchains=[...], programs=[...], sources=[...])``
    parametrizes the test over ``kernels`` and ``toolchains`` (grouped per value, so that the
    tests of one kernel share its guest) and declares the ``programs`` (host paths) and
    ``sources`` (``(name, Variant)``) the test will run.

Options (command line, or ini without the dashes: ``uh_kernel = trixie``)
    ``--uh-kernel`` (default ``default``; a comma-separated list runs every test without
    ``kernels`` in its marker once per kernel), ``--uh-qemu`` (host, backports, auto; default
    ``$HARNESS_QEMU``, else host), ``--uh-smp`` (1), ``--uh-samples`` (30), ``--uh-toolchain``
    (host), ``--uh-max-guests`` (1: guests alive at once), ``--uh-show`` (3: failing stacks
    printed per run).

Why a factory and declared programs
    A guest's programs are fixed at boot (they are in its initramfs).  ``unwind_run`` asks the
    session's pool for a guest of the test's (kernel, qemu, smp) that carries the program; the
    pool reuses a live one that does, or boots one carrying the program *and every program the
    collected tests declared in their markers*.  So declared programs cost one boot per kernel
    for the whole session, and an undeclared one still works (it costs a boot of its own).  At
    most ``--uh-max-guests`` guests live at once (least recently used closed first); a guest
    whose run hit an infrastructure error is closed and not reused.

Failures
    :func:`assert_unwinds` fails with the run's summary and its first failing stacks side by
    side (:func:`harness.report.text.stack_failures`).  Any other failure of a test that ran
    ``unwind_run`` (a plain ``assert not r.failures``, say) gets the same stacks as a report
    section, "unwind: failing stacks"; a passing one shows its runs' summaries with ``-rP``.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from .errors import HarnessError

# The rest of the harness is imported inside the functions that use it (each marked "lazy"): pytest
# loads this plugin (entry point pytest11) in every pytest run of the environment, most of which
# boot no guest, and importing the session, the engine and the images from here would put all of
# them in front of every test collection.

__all__ = ["GuestPool", "UnwindFailure", "assert_unwinds", "failing_stacks", "summarize"]

_DEFAULTS = {"kernel": "default", "qemu": None, "smp": 1, "samples": 30, "toolchain": "host",
             "max_guests": 1, "show": 3}

_results_key = pytest.StashKey[list]()
_declared_key = pytest.StashKey[dict]()
_pool_key = pytest.StashKey["GuestPool"]()


# -- options --------------------------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("unwind_harness", "user-space unwinding on QEMU guests (unwind-harness)")
    helps = {
        "kernel": "guest kernel(s), comma-separated: default, trixie, bookworm; tests without "
                  "unwind(kernels=...) run once per kernel (default: default)",
        "qemu": "QEMU: host, backports or auto (default: $HARNESS_QEMU, else host)",
        "smp": f"vCPUs of the guest (default: {_DEFAULTS['smp']})",
        "samples": f"requests that must land on the program's tasks per run (default: {_DEFAULTS['samples']})",
        "toolchain": "toolchain for unwind_run.source() without a marker: host, trixie, sid (default: host)",
        "max_guests": ("guests alive at once; the least recently used is closed first "
                       f"(default: {_DEFAULTS['max_guests']})"),
        "show": f"failing stacks printed side by side per run (default: {_DEFAULTS['show']})",
    }
    for name, text in helps.items():
        flag = "--uh-" + name.replace("_", "-")
        kw: dict = {"type": int} if isinstance(_DEFAULTS[name], int) else {}
        if name == "qemu":
            kw["choices"] = ["host", "backports", "auto"]
        group.addoption(flag, dest=f"uh_{name}", default=None, help=text, **kw)
        parser.addini(f"uh_{name}", text, default=None)


def _opt(config: pytest.Config, name: str):
    value = config.getoption(f"uh_{name}")
    if value is None:
        value = config.getini(f"uh_{name}")
        if value in (None, ""):
            return _DEFAULTS[name]
        try:
            if isinstance(_DEFAULTS[name], int):
                value = int(value)
            if name == "qemu" and value not in ("host", "backports", "auto"):
                raise ValueError(value)
        except ValueError:
            raise pytest.UsageError(f"ini option uh_{name} = {value!r}: not a valid value") from None
    return value


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "unwind(kernels=None, toolchains=None, programs=None, sources=None): run the test once per "
        "guest kernel and toolchain; declare the host binaries (programs) and guest program sources "
        "((name, Variant)) it runs, so that one guest per kernel carries them all (unwind-harness)")
    config.stash[_declared_key] = {"programs": [], "sources": []}


# -- the marker -----------------------------------------------------------------------------------
def _marker(node) -> pytest.Mark | None:
    return node.get_closest_marker("unwind")


def _listed(mark: pytest.Mark | None, key: str) -> list:
    if mark is None:
        return []
    value = mark.kwargs.get(key)
    if value is None:
        return []
    if isinstance(value, (str, Path)) or (key == "sources" and isinstance(value, tuple) and value
                                          and isinstance(value[0], str)):
        value = [value]
    return list(value)


def _option_kernels(config: pytest.Config) -> list[str]:
    return [k.strip() for k in str(_opt(config, "kernel")).split(",") if k.strip()]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    mark = _marker(metafunc.definition)
    if mark is None:
        # Still parametrized by the option's kernel(s): pytest then groups these tests with the
        # marked tests of the same kernel, and they share its guest.
        if "unwind_kernel" in metafunc.fixturenames:
            kernels = _option_kernels(metafunc.config)
            metafunc.parametrize("unwind_kernel", kernels, indirect=True, scope="session", ids=kernels)
        return
    unknown = set(mark.kwargs) - {"kernels", "toolchains", "programs", "sources"}
    if unknown or mark.args:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: pytest.mark.unwind takes keywords kernels, "
                                f"toolchains, programs, sources; not {sorted(unknown) or mark.args}")
    # Kernels at session scope: pytest groups the tests by kernel, so that one kernel's tests
    # share its guest.  Toolchains at function scope: every guest carries every declared
    # toolchain's builds, and grouping by toolchain too would interleave the kernels.
    for key, fixture, prefix, scope in (("kernels", "unwind_kernel", "", "session"),
                                        ("toolchains", "unwind_toolchain", "tc-", "function")):
        values = _listed(mark, key) or (_option_kernels(metafunc.config) if key == "kernels" else [])
        if values and fixture in metafunc.fixturenames:
            metafunc.parametrize(fixture, values, indirect=True, scope=scope,
                                 ids=[f"{prefix}{v}" for v in values])


@pytest.hookimpl(trylast=True)  # after -k and -m deselected theirs
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items) -> None:
    """Collect the programs the selected tests declare: every guest the pool boots carries them all."""
    declared = config.stash[_declared_key]
    for item in items:
        mark = _marker(item)
        if mark is None:
            continue
        for p in _listed(mark, "programs"):
            if str(p) not in declared["programs"]:
                declared["programs"].append(str(p))
        callspec = getattr(item, "callspec", None)
        tc = callspec.params.get("unwind_toolchain") if callspec else None
        toolchains = [tc] if tc else (_listed(mark, "toolchains") or [_opt(config, "toolchain")])
        for src in _listed(mark, "sources"):
            name, variant = (src, None) if isinstance(src, str) else src
            for t in toolchains:
                key = (name, t, variant if variant is not None else _default_variant())
                if key not in declared["sources"]:
                    declared["sources"].append(key)


def _default_variant():
    from .images.programs import Variant  # lazy: see the note at the top

    return Variant()


# -- guests ---------------------------------------------------------------------------------------
class GuestPool:
    """Booted guests keyed by (kernel, qemu, smp), each with the programs it carries."""

    def __init__(self, max_guests: int = 1, declared: dict | None = None):
        self.max_guests = max(1, max_guests)
        self.declared = declared or {"programs": [], "sources": []}
        self.live: collections.OrderedDict = collections.OrderedDict()  # key -> Session (LRU last)
        self.boots = 0
        self.booted: list[str] = []  # one line per guest booted
        self.unusable: dict = {}  # declared program -> why no guest carries it

    def get(self, kernel: str, qemu: str | None, smp: int, programs: Iterable = (), sources: Iterable = (),
            libs: Iterable = ()):
        from .session import GuestSpec, Session  # lazy: see the note at the top

        programs = [str(Path(p)) for p in programs]
        sources = list(sources)
        libs = [str(Path(p)) for p in libs]
        want_paths = {Path(p).resolve() for p in programs}
        for key, sess in self.live.items():
            if key[:3] != (kernel, qemu, smp):
                continue
            have_paths = {p.path for p in sess.programs.values()}
            have_sources = set(sess.spec.programs)
            if want_paths <= have_paths and set(sources) <= have_sources and set(libs) <= set(sess.spec.libs):
                self.live.move_to_end(key)
                return sess
        all_programs = list(dict.fromkeys([*self._usable_declared("programs"), *programs]))
        all_sources = list(dict.fromkeys([*self._usable_declared("sources"), *sources]))
        while len(self.live) >= self.max_guests:
            _, old = self.live.popitem(last=False)
            old.close()
        all_libs = list(dict.fromkeys(libs))
        spec = GuestSpec(kernel=kernel, qemu=qemu, smp=smp, user_programs=all_programs, programs=all_sources,
                         libs=all_libs)
        sess = Session(spec).start()
        self.boots += 1
        self.booted.append(f"{kernel} ({sess.machine.release}) on {sess.accel.upper()}, "
                           f"{sess.qemu.banner if sess.qemu else 'QEMU ?'}, {smp} vCPU, "
                           f"{len(sess.programs)} programs")
        self.live[(kernel, qemu, smp, tuple(all_programs), tuple(all_sources), self.boots)] = sess
        return sess

    def _usable_declared(self, kind: str) -> list:
        """The declared programs that can be put in a guest: one that cannot (no such file, not
        x86, a build that fails) fails only the tests that run it, not every guest's boot."""
        from .images.errors import ImageError  # lazy: see the note at the top
        from .images.programs import build_program, user_program
        from .images.toolchain import get_toolchain

        usable = []
        for item in self.declared[kind]:
            if item not in self.unusable:
                try:
                    if kind == "programs":
                        user_program(item)
                    else:
                        build_program(item[0], get_toolchain(item[1]), item[2])
                except ImageError as exc:
                    self.unusable[item] = str(exc)
                    continue
                usable.append(item)
        return usable

    def discard(self, sess) -> None:
        """Close a guest that may be broken (its run hit an infrastructure error)."""
        for key, s in list(self.live.items()):
            if s is sess:
                del self.live[key]
        sess.close()

    def close(self) -> None:
        while self.live:
            _, sess = self.live.popitem()
            sess.close()


@pytest.fixture(scope="session")
def _unwind_pool(pytestconfig: pytest.Config):
    pool = GuestPool(_opt(pytestconfig, "max_guests"), pytestconfig.stash[_declared_key])
    pytestconfig.stash[_pool_key] = pool
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def unwind_kernel(request: pytest.FixtureRequest) -> str:
    """The guest kernel of this test: the ``unwind(kernels=...)`` parameter, else ``--uh-kernel``."""
    return getattr(request, "param", None) or _option_kernels(request.config)[0]


@pytest.fixture
def unwind_toolchain(request: pytest.FixtureRequest) -> str:
    """The toolchain of this test: the ``unwind(toolchains=...)`` parameter, else ``--uh-toolchain``."""
    return getattr(request, "param", None) or _opt(request.config, "toolchain")


@pytest.fixture(scope="session")
def unwind_guest(_unwind_pool: GuestPool, pytestconfig: pytest.Config):
    """A factory: ``unwind_guest(programs=[paths], sources=[(name, toolchain, Variant)], kernel=None,
    qemu=None, smp=None)`` returns a booted :class:`harness.session.Session` carrying them
    (cached for the test session, closed at its end)."""

    def get(programs: Sequence = (), sources: Sequence = (), kernel: str | None = None,
            qemu: str | None = None, smp: int | None = None, libs: Sequence = ()):
        return _unwind_pool.get(kernel or _option_kernels(pytestconfig)[0],
                                qemu if qemu is not None else _opt(pytestconfig, "qemu"),
                                smp or _opt(pytestconfig, "smp"), programs, sources, libs)

    return get


class UnwindRunner:
    """``unwind_run``: runs a program under sampling on the test's guest and returns its Result."""

    def __init__(self, request: pytest.FixtureRequest, pool: GuestPool, kernel: str, toolchain: str,
                 tmp_path: Path):
        self._request = request
        self._pool = pool
        self.kernel = kernel
        self.toolchain = toolchain
        self.tmp_path = tmp_path
        self.results: list = []
        self.logs: list[Path] = []

    def _config(self, name: str):
        return _opt(self._request.config, name)

    def __call__(self, program: str | Path, args: Sequence[str] = (), samples: int | None = None,
                 libs: Sequence[str | Path] = (), **scenario_fields):
        """Sample the host binary ``program`` (static or dynamic, x86-64 or i386) run with ``args``,
        with ``libs`` (the libraries it dlopens) in the guest too.
        ``scenario_fields`` override :class:`harness.scenarios.catalog.Scenario` fields
        (``requests=("timer",)``, ``seed=1``, ``break_ra=True``, ...).  With ``--uh-smp`` above 1
        the requests are timer interrupts unless ``requests`` is given."""
        from .scenarios.catalog import user_scenario  # lazy: see the note at the top

        libs = tuple(str(p) for p in libs)
        sc = user_scenario(str(program), list(args), samples=samples or self._config("samples"), libs=libs)
        sc = dataclasses.replace(sc, **self._smp_requests(scenario_fields))
        sess = self._guest(programs=[str(program)], libs=libs)
        return self._run(sess, sc)

    def source(self, name: str, args: Sequence[str] | None = None, variant=None, toolchain: str | None = None,
               samples: int | None = None, **scenario_fields):
        """Sample the guest program ``guest_programs/NAME.c`` built with ``toolchain`` (default: the
        test's) in ``variant`` (:class:`harness.images.programs.Variant`); the unwinder is SFrame's
        where the variant has SFrame and no frame pointers, else frame pointers."""
        from .images.programs import Variant  # lazy: see the note at the top
        from .scenarios.catalog import Scenario, unwinder_for

        variant = variant if variant is not None else Variant()
        tc = toolchain or self.toolchain
        fields = {"unwinder": unwinder_for(variant, tc), "samples": samples or self._config("samples")}
        if args is not None:
            fields["args"] = tuple(args)
        fields.update(self._smp_requests(scenario_fields))
        sc = Scenario(f"{name}-{variant.tag}-{tc}", program=name, toolchain=tc, variant=variant, **fields)
        sess = self._guest(sources=[(name, tc, variant)])
        return self._run(sess, sc)

    def _smp_requests(self, fields: dict) -> dict:
        """On more than one vCPU, timer-interrupt requests unless the test names its own: an
        injected NMI reaches vCPU 0 only (as tests/qemu/test_engine.py does)."""
        if self._config("smp") > 1 and "requests" not in fields:
            return {**fields, "requests": ("timer",)}
        return fields

    def _guest(self, programs=(), sources=(), libs=()):
        return self._pool.get(self.kernel, self._config("qemu"), self._config("smp"), programs, sources, libs)

    def _run(self, sess, sc):
        from .deferred.log import JsonlFile  # lazy: see the note at the top
        from .scenarios.engine import Engine

        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", sc.name)
        n = sum(p.name.startswith(stem + ".") for p in self.logs)
        path = self.tmp_path / f"{stem}{f'.{n + 1}' if n else ''}.jsonl"
        with JsonlFile(path) as log:
            try:
                result = Engine(sess, sc, log).run()
            except BaseException:
                self._pool.discard(sess)  # stopped anywhere: not fit for the next test
                raise
        self.logs.append(path)
        self.results.append((result, path))
        self._request.node.stash.setdefault(_results_key, []).append((result, path))
        self._request.node.user_properties.append((f"unwind {sc.name}", summarize(result, path)))
        if result.errors:
            self._pool.discard(sess)
        return result


@pytest.fixture
def unwind_run(request: pytest.FixtureRequest, _unwind_pool: GuestPool, unwind_kernel: str,
               unwind_toolchain: str, tmp_path: Path) -> UnwindRunner:
    """``unwind_run(path, args=(), samples=None, **scenario_fields) -> Result`` and
    ``unwind_run.source(name, args=None, variant=Variant(), toolchain=None, ...) -> Result``."""
    return UnwindRunner(request, _unwind_pool, unwind_kernel, unwind_toolchain, tmp_path)


# -- reporting ------------------------------------------------------------------------------------
class UnwindFailure(HarnessError, AssertionError):
    """A run with failing stacks, problems, errors or too few stacks (its message shows them);
    an AssertionError too: to pytest, a failed check like any ``assert``."""


def summarize(result, log: Path | None = None) -> str:
    """One paragraph: what was checked, by which oracles, the verdicts and causes, the log."""
    r = result
    pairs = ", ".join(f"{o} {v} {n}" for (o, v), n in sorted(r.pairs.items()))
    causes = ", ".join(f"{c} {n}" for c, n in r.causes.most_common()) or "none"
    head = (f"{r.scenario.name}: {r.own_stacks} stacks of the program checked ({r.stacks} delivered), "
            f"{r.failed_stacks} failing; unwinder {r.scenario.unwinder}; oracles {', '.join(r.oracles) or 'none'}")
    lines = [head, f"  verdicts: {pairs or 'none'}", f"  causes: {causes}"]
    for what in ("errors", "problems", "invariant_violations", "notes"):
        for text in getattr(r, what):
            lines.append(f"  {what.replace('_', ' ')[:-1]}: {text}")
    if r.output_tail:
        lines.append(f"  the program's output ends ({r.program_output or 'no file'}):")
        lines += [f"    {line}" for line in r.output_tail]
    if log is not None:
        lines.append(f"  log: {log}")
    return "\n".join(lines)


def failing_stacks(result, show: int = 3) -> str:
    """The first ``show`` failing stack records of ``result``, each pair side by side."""
    from .report.text import stack_failures  # lazy: see the note at the top

    out = []
    for rec in result.failures[:show]:
        out.extend(stack_failures(rec))
    more = result.failed_stacks - min(show, len(result.failures))
    if more > 0:
        out.append(f"... and {more} more failing stacks (all of them in the JSONL log)")
    return "\n\n".join(out)


def assert_unwinds(result, min_stacks: int = 1, show: int = 3) -> None:
    """Fail (:class:`UnwindFailure`) unless every stack agreed or was explained by a proven cause
    the scenario's facts allow (a user's binary: any), with no delivery problem, error or
    invariant violation, and at least ``min_stacks`` stacks of the program were checked."""
    __tracebackhide__ = True  # the failure is the test's, not this helper's
    r = result
    why = []
    if r.failed_stacks:
        why.append(f"{r.failed_stacks} stacks with a divergence no cause proves")
    for what in ("errors", "problems", "invariant_violations"):
        if getattr(r, what):
            why.append(f"{len(getattr(r, what))} {what.replace('_', ' ')}")
    if r.undeclared:  # a guest program's run proved a cause its facts say it cannot show
        why.append("causes outside the scenario's declaration: "
                   + ", ".join(f"{c} x{n}" for c, n in r.undeclared.items()))
    if r.own_stacks < min_stacks:
        why.append(f"{r.own_stacks} stacks of the program checked, fewer than {min_stacks}: "
                   f"{r.shortfall() or 'every request asked for landed on it'}")
    if not why:
        return
    text = f"unwinding failed: {'; '.join(why)}\n{summarize(r)}"
    if r.failures:
        text += "\n\n" + failing_stacks(r, show)
    raise UnwindFailure(text)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Each run's summary (and, if any, its failing stacks side by side) as a report section:
    shown under a failing test, and under a passing one with ``-rP``."""
    report = yield
    runs = item.stash.get(_results_key, [])
    if report.when != "call" or not runs:
        return report
    # assert_unwinds already printed the stacks in its message: no second copy.
    if call.excinfo is not None and call.excinfo.errisinstance(UnwindFailure):
        return report
    show = _opt(item.config, "show")
    parts = []
    for result, log in runs:
        parts.append(summarize(result, log))
        if result.failures:
            parts.append(failing_stacks(result, show))
    title = "unwind: failing stacks" if any(r.failures for r, _ in runs) else "unwind: runs"
    report.sections.append((title, "\n\n".join(parts)))
    return report


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    pool = config.stash.get(_pool_key, None)
    if pool is None or not pool.booted:
        return
    terminalreporter.write_sep("-", f"unwind-harness: {pool.boots} guest{'s' if pool.boots != 1 else ''} booted")
    for line in pool.booted:
        terminalreporter.write_line(line)
    for item, why in pool.unusable.items():
        terminalreporter.write_line(f"declared but left out of the guests: {item}: {why}")
