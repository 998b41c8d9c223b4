"""Tasks on Dask distributed: an embedded ``LocalCluster`` by default, an existing cluster with
``scheduler="tcp://HOST:PORT"``.

A :class:`Task` is a plain spec: a module-level function, its picklable arguments and a key that
names it in the summary.  :meth:`Executor.run` submits them (at most ``window`` in flight, so a
campaign of a million seeds is drawn as it goes and a budget can stop the drawing), hands each
result to the caller as it comes (:class:`Outcome`, on the client: the caller merges and writes),
and returns a :class:`Summary`.

Faults:

- a worker that dies while running a task: the scheduler runs the task again on another worker
  (its own ``distributed.scheduler.allowed-failures`` bound: past it the task is failed with
  ``KilledWorker``).  The scheduler's ``remove-worker`` event names the tasks the worker held
  (running, or queued there next): the summary lists them as retried, with the worker.  Each
  task's result is taken once, from its one future: a rerun is never counted twice;
- a task that raises: submitted again (a new key) up to ``retries`` more times, each reason kept;
  an error about the task's input (exit code 2) is not retried.  A task that fails every try is
  an :class:`Outcome` with its error, and the rest of the campaign goes on;
- the scheduler lost (the client's connection down for :data:`LOST_AFTER` seconds): :class:`SchedulerLost`
  (exit 3); the caller has every result delivered before it;
- Ctrl-C (``KeyboardInterrupt``): the futures are cancelled and every worker kills the child
  processes this campaign's tasks started there (:func:`harness.campaign.isolate.kill_campaign`:
  a guest is a child's child and dies with it), then the interrupt goes on up.

Workers run one task at a time (one thread each: hypothesis is not meant for threads, and a live
task is one guest): a ``LocalCluster`` has one worker per core the process may use
(:func:`default_workers`); an existing cluster's workers are started ``dask worker ADDRESS
--nthreads 1`` (``--nworkers N`` for several on one machine), which :meth:`Executor.__enter__`
checks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import EXIT_USAGE, HarnessError
from ..progress import note, step

__all__ = ["ClusterError", "Executor", "Outcome", "SchedulerLost", "Summary", "Task", "default_workers"]

RETRIES = 2  # a task that raises is tried 1 + RETRIES times
POLL = 0.5  # seconds between looks at the futures and the connection
LOST_AFTER = 15.0  # seconds without the scheduler before the campaign ends (exit 3)
CONNECT_TIMEOUT = 20.0  # seconds to reach a --scheduler
CANCEL_TIMEOUT = 30.0  # seconds the workers get to kill a cancelled campaign's children
WORKERS_TIMEOUT = 60.0  # seconds to wait for a --scheduler's first worker


class ClusterError(HarnessError):
    """The cluster cannot be had: the scheduler is unreachable, it has no worker, or a worker runs
    more than one thread (exit 3)."""


class ClusterAddressError(HarnessError):
    """A ``--scheduler`` value that is no address (exit 2)."""

    exit_code = EXIT_USAGE


class SchedulerLost(HarnessError):
    """The connection to the scheduler was lost for good mid-campaign (exit 3).  ``summary``:
    what was done before."""

    def __init__(self, message: str, summary: Summary):
        super().__init__(message)
        self.summary = summary


@dataclass(frozen=True)
class Task:
    key: str  # unique within the campaign: how the summary names it
    fn: Callable[..., Any]  # module-level: a worker imports it by name
    args: tuple = ()


@dataclass
class Outcome:
    task: Task
    result: Any = None
    error: str | None = None  # the last try's error, when every try failed
    tries: int = 1
    worker: str | None = None  # the worker that produced the result

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class Summary:
    workers: int = 0
    where: str = ""  # "LocalCluster" or the scheduler's address
    dashboard: str | None = None
    done: int = 0
    failed: list[Outcome] = field(default_factory=list)
    retried: dict[str, list[str]] = field(default_factory=dict)  # task key -> why, each retry
    lost_workers: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)  # cancelled at the run's deadline
    units: int = 0  # what the caller counts (programs, files, runs)
    elapsed: float = 0.0

    def to_json(self) -> dict:
        return {"workers": self.workers, "where": self.where, "dashboard": self.dashboard, "done": self.done,
                "failed": [{"task": o.task.key, "error": o.error, "tries": o.tries} for o in self.failed],
                "retried": {k: list(v) for k, v in sorted(self.retried.items())},
                "lost_workers": list(self.lost_workers), "unfinished": list(self.unfinished), "units": self.units,
                "elapsed": round(self.elapsed, 1)}


def default_workers() -> int:
    """One worker per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def _ctrl_c_for_the_client_alone():
    """A terminal's Ctrl-C reaches its whole foreground process group: a ``LocalCluster``'s
    worker processes too, which would die at once, their tasks' children (a guest's harness)
    killed by ``PR_SET_PDEATHSIG`` with no clean-up.  Spawned while SIGINT and SIGHUP are ignored,
    they keep ignoring them (an ignored signal stays so across exec, and Python then installs no
    handler of its own): the client alone ends on them, cancelling the tasks in order
    (:meth:`Executor.cancel`).  A Ctrl-C in the cluster's 2-5 s start is lost with them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGHUP)}
    for sig in old:
        signal.signal(sig, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _call(fn: Callable[..., Any], args: tuple) -> tuple[Any, str]:
    """What a worker runs: the task, and the worker's address with its result."""
    import warnings

    from distributed import get_worker
    with warnings.catch_warnings():
        # hypothesis notices the worker's own threads (heartbeats) drawing from the global
        # ``random`` while it generates; its own generator is seeded apart and unaffected
        warnings.filterwarnings("ignore", message="Do not use the `random` module inside strategies")
        return fn(*args), get_worker().address


class Executor:
    """A cluster for one campaign (a context manager).  ``scheduler``: an existing cluster's
    address, else a ``LocalCluster`` of ``workers`` (default :func:`default_workers`)."""

    def __init__(self, scheduler: str | None = None, *, workers: int | None = None, retries: int = RETRIES,
                 topic: str = "campaign", live: bool = False):
        if scheduler is not None and "://" not in scheduler and ":" not in scheduler:
            raise ClusterAddressError(f"--scheduler {scheduler!r}: not an address (tcp://HOST:PORT)")
        if workers is not None and workers < 1:
            raise ClusterAddressError(f"workers {workers}: at least 1")
        self.scheduler, self.n_workers, self.retries, self.topic = scheduler, workers, retries, topic
        self.live = live  # a guest per task: a LocalCluster never has more workers than cores
        self.id = f"harness-{uuid.uuid4().hex[:10]}"
        self.client = None
        self.cluster = None
        self.summary = Summary()
        self._removed: list[tuple[str, list[str]]] = []
        self._lock = threading.Lock()
        self._lost_since: float | None = None
        self._started = time.monotonic()
        self._scratch: str | None = None

    # ------------------------------------------------------------------------- the cluster

    def __enter__(self) -> Executor:
        import dask
        from distributed import Client, LocalCluster
        logging.getLogger("distributed").setLevel(logging.ERROR)
        # the scheduler's own bound on a task whose workers keep dying (LocalCluster; an existing
        # scheduler keeps its configuration)
        dask.config.set({"distributed.scheduler.allowed-failures": self.retries})
        try:
            if self.scheduler is None:
                n = self.n_workers or default_workers()
                if self.live and n > default_workers():
                    note(self.topic, f"live work: {n} workers asked, {default_workers()} cores: one guest per core")
                    n = default_workers()
                # the workers' directories (their tasks' scratch) in one of ours, removed at the end
                self._scratch = tempfile.mkdtemp(prefix="harness-dask-")
                dask.config.set({"temporary-directory": self._scratch})  # the scheduler's too
                with _ctrl_c_for_the_client_alone():
                    self.cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                                dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR,
                                                local_directory=self._scratch)
                self.client = Client(self.cluster, timeout=CONNECT_TIMEOUT)
                self.summary.where = "LocalCluster"
            else:
                address = self.scheduler if "://" in self.scheduler else f"tcp://{self.scheduler}"
                self.client = Client(address, timeout=CONNECT_TIMEOUT)
                self.summary.where = address
                self.client.wait_for_workers(1, timeout=WORKERS_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            self.close()
            raise ClusterError(f"cluster {self.scheduler or 'LocalCluster'}: {exc}") from exc
        workers = self.client.scheduler_info(n_workers=-1)["workers"]
        threaded = sorted(f"{a} ({w['nthreads']} threads)" for a, w in workers.items() if w["nthreads"] > 1)
        if threaded:
            self.close()
            raise ClusterError(f"workers run one task at a time: {', '.join(threaded)}; start each with "
                               "`dask worker ADDRESS --nthreads 1` (--nworkers N for several on one machine)")
        self.summary.workers = len(workers)
        self.summary.dashboard = self.client.dashboard_link
        self.client.subscribe_topic("all", self._event)
        return self

    def __exit__(self, kind, exc, tb) -> None:
        self.close()

    def close(self) -> None:
        if self.client is not None and self.client.status != "running":
            # a lost scheduler: the client's own attempts to reach it again end in tracebacks
            for name in [n for n in logging.root.manager.loggerDict if n.startswith("distributed")]:
                logging.getLogger(name).setLevel(logging.CRITICAL + 1)
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.unsubscribe_topic("all")
        for thing in (self.client, self.cluster):
            if thing is not None:
                with contextlib.suppress(Exception):
                    thing.close(timeout=10) if thing is self.client else thing.close(timeout=20)
        self.client = self.cluster = None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def _event(self, event) -> None:
        """The scheduler's events (its thread): a worker removed, with the tasks it was running."""
        _, msg = event
        if isinstance(msg, dict) and msg.get("action") == "remove-worker":
            with self._lock:
                self._removed.append((msg.get("worker", "?"), [str(k) for k in msg.get("processing-tasks", ())]))

    # ------------------------------------------------------------------------- running tasks

    def run(self, tasks: Iterable[Task], on_result: Callable[[Outcome], None], *,
            count: Callable[[Any], int] = lambda result: 0, unit: str = "programs",
            more: Callable[[], bool] = lambda: True, window: int | None = None,
            deadline: float | None = None) -> Summary:
        """Run ``tasks`` (drawn as room frees up, while ``more()``), each :class:`Outcome` to
        ``on_result`` as it comes; ``count(result)``: the units it did (the rate's numerator).
        At ``deadline`` (``time.monotonic()``) the tasks in flight are cancelled and named in
        :attr:`Summary.unfinished`."""
        from distributed import wait
        from distributed.client import FuturesCancelledError
        assert self.client is not None, "Executor.run outside its with block"
        window = window or 2 * max(self.summary.workers, 1)
        tasks = iter(tasks)
        inflight: dict[Any, tuple[Task, int]] = {}  # future -> (task, try)
        by_key: dict[str, Any] = {}
        exhausted = False
        s = self.summary

        def submit(task: Task, attempt: int) -> None:
            key = f"{self.id}-{task.key}-try{attempt}"
            fut = self.client.submit(_call, task.fn, task.args, key=key, pure=False, retries=0)
            inflight[fut] = (task, attempt)
            by_key[key] = fut

        with step(self.topic, f"{s.where}: {s.workers} workers"
                  + (f", dashboard {s.dashboard}" if s.dashboard else "")) as st:
            try:
                while True:
                    while not exhausted and len(inflight) < window and more():
                        try:
                            task = next(tasks)
                        except StopIteration:
                            exhausted = True
                            break
                        submit(task, 1)
                    if not inflight:
                        break
                    if deadline is not None and time.monotonic() >= deadline:
                        s.unfinished += [task.key for task, _ in inflight.values()]
                        self.cancel(list(inflight))
                        inflight.clear()
                        break
                    try:
                        done, _ = wait(list(inflight), timeout=POLL, return_when="FIRST_COMPLETED")
                    except TimeoutError:
                        done = set()
                    except FuturesCancelledError as exc:  # the scheduler dropped them: its connection is gone
                        s.elapsed = time.monotonic() - self._started
                        raise SchedulerLost(f"the scheduler {s.where} was lost with {len(inflight)} tasks unfinished "
                                            f"({s.done} done): the client's connection to it closed", s) from exc
                    self._workers_removed(by_key, inflight)
                    # the finished ones' results in one round trip (one at a time costs one each)
                    finished = [f for f in done if f.status == "finished"]
                    values = dict(zip(finished, self.client.gather(finished), strict=True)) if finished else {}
                    for fut in done:
                        task, attempt = inflight.pop(fut)
                        by_key.pop(fut.key, None)
                        self._settle(fut, task, attempt, submit, on_result, count, values)
                    self._check_connection(inflight)
                    s.elapsed = time.monotonic() - self._started
                    rate = s.units / s.elapsed * 60 if s.elapsed > 0 else 0.0
                    running = min(len(inflight), s.workers)  # one task at a time per worker
                    st.update(f"{s.done} done, {running} running, {len(inflight) - running} queued, "
                              f"{len(s.retried)} retried, {len(s.failed)} failed; {rate:.0f} {unit}/min")
            except KeyboardInterrupt:
                self.cancel(list(inflight))
                raise
            st.end(f"{s.done} tasks done, {len(s.retried)} retried, {len(s.failed)} failed on {s.workers} workers "
                   f"({s.where}) in {s.elapsed:.0f} s")
        return s

    def _settle(self, fut, task: Task, attempt: int, submit, on_result, count, values: dict) -> None:
        from distributed.scheduler import KilledWorker
        s = self.summary
        if fut in values:
            result, worker = values[fut]
            fut.release()
            s.done += 1
            s.units += count(result)
            on_result(Outcome(task, result, None, attempt, worker))
            return
        if fut.status == "cancelled":  # the scheduler dropped it (its connection lost, or restarted)
            self._lost_since = self._lost_since or time.monotonic()
            self._check_connection({})
            s.retried.setdefault(task.key, []).append("cancelled by the scheduler")
            submit(task, attempt + 1)
            return
        exc = fut.exception()
        fut.release()
        why = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, KilledWorker):  # its workers died on every try: the scheduler's bound
            self._fail(task, attempt, f"the workers running it died on every try ({exc})", on_result)
        elif attempt <= self.retries and getattr(exc, "exit_code", None) != EXIT_USAGE:
            s.retried.setdefault(task.key, []).append(why)
            submit(task, attempt + 1)
        else:
            self._fail(task, attempt, why, on_result)

    def _fail(self, task: Task, attempt: int, why: str, on_result) -> None:
        out = Outcome(task, None, why, attempt)
        self.summary.failed.append(out)
        on_result(out)

    def _workers_removed(self, by_key: dict, inflight: dict) -> None:
        with self._lock:
            removed, self._removed = self._removed, []
        for worker, keys in removed:
            self.summary.lost_workers.append(worker)
            for key in keys:
                fut = by_key.get(key)
                if fut is not None and fut in inflight:
                    self.summary.retried.setdefault(inflight[fut][0].key, []).append(
                        f"worker {worker} lost while it held the task")

    def _check_connection(self, inflight) -> None:
        status = getattr(self.client, "status", "running")
        if status == "running" and self._lost_since is None:
            return
        if status == "running":
            self._lost_since = None
            return
        self._lost_since = self._lost_since or time.monotonic()
        if status == "closed" or time.monotonic() - self._lost_since >= LOST_AFTER:
            self.summary.elapsed = time.monotonic() - self._started
            raise SchedulerLost(f"the scheduler {self.summary.where} was lost ({status}) with {len(inflight)} "
                                f"tasks unfinished; {self.summary.done} done", self.summary)

    def cancel(self, futures: list) -> None:
        """Cancel ``futures`` and have every worker kill this campaign's child processes."""
        from .isolate import kill_campaign
        if self.client is None:
            return
        with contextlib.suppress(Exception):
            self.client.cancel(futures, force=True)
        with contextlib.suppress(Exception):
            self.client.run(kill_campaign, self.id, wait=True, on_error="ignore")
