"""Progress of long steps: image downloads and builds, the guest's boot, a scenario's sampling.

Library code reports, it never writes to the terminal: :func:`step` starts a step and returns
its handle (``update``, ``end``, ``fail``; a context manager that fails the step on an
exception), :func:`note` says one thing once.  Each report is a record on the
``harness.progress`` logger carrying an :class:`Event` (``record.progress``): with nothing
installed they go where the program's logging sends them (nowhere, by default, below WARNING).

The command line installs a :class:`StatusRenderer` (:func:`install`).  On a terminal it keeps
one live status line (carriage return and clear-to-end, at most ~10 redraws a second, the
elapsed time ticking once a second); a step's end is printed as a permanent line.  Elsewhere
(a pipe, a file, CI) it prints plain lines: one at a step's start and one at its end, and for
a step with counts one line per tenth of its total (at most one a second) or per 5 s.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

__all__ = ["Event", "StatusRenderer", "Step", "install", "note", "sampling_reporter", "step", "uninstall"]

log = logging.getLogger("harness.progress")

START, UPDATE, END, FAIL, NOTE = "start", "update", "end", "fail", "note"
_ids = itertools.count(1)


@dataclass(frozen=True)
class Event:
    kind: str  # start | update | end | fail | note
    step: int  # the step's id (0 for a note)
    topic: str  # "images", "guest", "run": shown as [topic]
    text: str
    done: int | None = None  # counts, for steps that have them (requests of asked)
    total: int | None = None
    started: float = 0.0  # time.monotonic() at the step's start

    def line(self, now: float | None = None) -> str:
        """The text a renderer shows: ``[topic] text``, with the elapsed time while it runs."""
        s = f"[{self.topic}] {self.text}"
        if now is not None and self.kind in (START, UPDATE):
            s += f" ({now - self.started:.0f}s)"
        return s


def _emit(event: Event) -> None:
    level = logging.DEBUG if event.kind == UPDATE else logging.INFO
    if log.isEnabledFor(level):
        log.log(level, "%s", event.line(), extra={"progress": event})


class Step:
    """One long step in progress.  ``with step(...) as st:`` ends it when the block ends (or
    fails it, with the exception's name, when the block raises)."""

    def __init__(self, topic: str, text: str, total: int | None = None):
        self.topic, self.text = topic, text
        self.id = next(_ids)
        self.started = time.monotonic()
        self.finished = False
        _emit(Event(START, self.id, topic, text, 0 if total else None, total, self.started))

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def update(self, text: str | None = None, done: int | None = None, total: int | None = None) -> None:
        if text is not None:
            self.text = text
        _emit(Event(UPDATE, self.id, self.topic, self.text, done, total, self.started))

    def end(self, text: str | None = None) -> None:
        """The step is over; ``text`` is its summary (the permanent line)."""
        if not self.finished:
            self.finished = True
            _emit(Event(END, self.id, self.topic, text or f"{self.text}: done in {self.elapsed:.1f}s",
                        started=self.started))

    def fail(self, why: str) -> None:
        if not self.finished:
            self.finished = True
            _emit(Event(FAIL, self.id, self.topic, f"{self.text}: {why}", started=self.started))

    def __enter__(self) -> Step:
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is None:
            self.end()
        elif issubclass(kind, KeyboardInterrupt):
            self.fail("interrupted")
        else:
            self.fail(f"failed after {self.elapsed:.1f}s ({kind.__name__})")


def step(topic: str, text: str, total: int | None = None) -> Step:
    """Start a long step (a download, a build, a boot, a scenario's sampling)."""
    return Step(topic, text, total)


def note(topic: str, text: str) -> None:
    """One line worth saying once (which QEMU or accelerator was chosen, and why)."""
    _emit(Event(NOTE, 0, topic, text, started=time.monotonic()))


def sampling_reporter(topic: str = "run") -> Callable:
    """A progress callback for :class:`harness.scenarios.engine.Engine`: each sampling state
    (scenario, requests on the program's tasks done of asked, stacks checked, failures so far)
    becomes a step's update; the state marked finished ends it."""
    current: dict[str, Step] = {}

    def report(s) -> None:
        st = current.get("step")
        if st is None:
            st = current["step"] = step(topic, f"{s.scenario}: starting", total=s.samples)
        text = (f"{s.scenario}: {s.sampled}/{s.samples} requests on its tasks ({s.requests} in all), "
                f"{s.stacks} stacks checked, {s.failed} failed")
        if s.finished:
            if getattr(s, "interrupted", False):
                st.text = text
                st.fail(f"interrupted after {s.seconds:.1f}s")
            else:
                st.end(f"{text}, in {s.seconds:.1f}s")
            current.clear()
        else:
            st.update(text, s.sampled, s.samples)

    return report


class StatusRenderer(logging.Handler):
    """Renders progress events on ``stream``: a live status line when ``live`` (default: the
    stream is a terminal), plain lines otherwise.  ``clock`` and ``width`` are for tests."""

    CLEAR = "\x1b[K"  # erase to the end of the line

    def __init__(self, stream: IO[str], live: bool | None = None, clock: Callable[[], float] = time.monotonic,
                 width: int | None = None, interval: float = 0.1, plain_every: float = 5.0,
                 plain_least: float = 1.0):
        super().__init__(logging.DEBUG)
        self.stream = stream
        self.live = _isatty(stream) if live is None else live
        self.clock = clock
        self.width = width
        self.interval = interval  # live: the least time between two redraws
        self.plain_every = plain_every  # plain: a line of a step's counts at least this often ...
        self.plain_least = plain_least  # ... and for each tenth done, but never closer than this
        self.active: dict[int, Event] = {}  # running steps, the newest last: it is shown
        self._drawn = False  # a status line is on the screen (the cursor is at its end)
        self._dirty = False  # the state changed since the last redraw
        self._last_draw = float("-inf")
        self._plain: dict[int, tuple[float, int]] = {}  # step -> (time of its last line, its tenth)
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    # -- logging.Handler -------------------------------------------------------------------
    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "progress", None)
        if event is None:
            return
        try:
            self.show(event)
        except Exception:
            self.handleError(record)

    def show(self, ev: Event) -> None:
        now = self.clock()
        if ev.kind == NOTE:
            self._permanent(ev.line())
        elif ev.kind == START:
            self.active[ev.step] = ev
            if self.live:
                self._dirty = True
                self._redraw(now)
            else:
                self._plain[ev.step] = (now, 0)
                self._write(ev.line() + "\n")
        elif ev.kind == UPDATE:
            if ev.step not in self.active:
                return
            self.active[ev.step] = ev
            if self.live:
                self._dirty = True
                self._redraw(now)
            else:
                self._plain_update(ev, now)
        else:  # END, FAIL
            self.active.pop(ev.step, None)
            self._plain.pop(ev.step, None)
            self._permanent(ev.line())

    def tick(self) -> None:
        """Redraw the status line so that its elapsed time moves (the ticker thread's call)."""
        with self.lock:
            if self.live and self.active:
                self._dirty = True
                self._redraw(self.clock())

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None and self._ticker is not threading.current_thread():
            self._ticker.join(timeout=2)
        with self.lock:
            if self._drawn:
                self._write("\r" + self.CLEAR)
                self._drawn = False
        super().close()

    def start_ticker(self, every: float = 1.0) -> None:
        if not self.live or self._ticker is not None:
            return

        def run():
            while not self._stop.wait(every):
                self.tick()

        self._ticker = threading.Thread(target=run, name="progress-ticker", daemon=True)
        self._ticker.start()

    # -- drawing ---------------------------------------------------------------------------
    def _columns(self) -> int:
        if self.width:
            return self.width
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, OSError, ValueError):
            return shutil.get_terminal_size().columns

    def _status(self, now: float) -> str:
        ev = self.active[next(reversed(self.active))]
        text = ev.line(now)
        cols = self._columns() - 1  # never the last column: a wrapped line cannot be rewritten
        return text if len(text) <= cols else text[: max(cols - 3, 0)] + "..."

    def _redraw(self, now: float, force: bool = False) -> None:
        if not self._dirty or (not force and now - self._last_draw < self.interval):
            return
        self._last_draw = now
        self._dirty = False
        if self.active:
            self._write("\r" + self._status(now) + self.CLEAR)
            self._drawn = True
        elif self._drawn:
            self._write("\r" + self.CLEAR)
            self._drawn = False

    def _permanent(self, line: str) -> None:
        if self.live:
            # Over the status line, then the status line again below it.
            self._write("\r" + line + self.CLEAR + "\n")
            self._drawn = False
            if self.active:
                self._dirty = True
                self._redraw(self.clock(), force=True)
        else:
            self._write(line + "\n")

    def _plain_update(self, ev: Event, now: float) -> None:
        last, tenth = self._plain.get(ev.step, (now, 0))
        new_tenth = (10 * ev.done // ev.total) if ev.done is not None and ev.total else tenth
        if (new_tenth > tenth and now - last >= self.plain_least) or now - last >= self.plain_every:
            self._plain[ev.step] = (now, max(tenth, new_tenth))
            self._write(ev.line(now) + "\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def install(stream: IO[str], live: bool | None = None) -> StatusRenderer:
    """Show progress on ``stream`` (the command line's stderr) until :func:`uninstall`."""
    renderer = StatusRenderer(stream, live)
    log.addHandler(renderer)
    log.setLevel(logging.DEBUG)
    log.propagate = False  # shown here, not again by a root handler
    renderer.start_ticker()
    return renderer


def uninstall(renderer: StatusRenderer) -> None:
    log.removeHandler(renderer)
    renderer.close()
    if not log.handlers:
        log.setLevel(logging.NOTSET)
        log.propagate = True

