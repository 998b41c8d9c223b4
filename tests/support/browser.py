"""Headless Chromium for the report tests, driven over the DevTools protocol on a pipe
(``--remote-debugging-pipe``: JSON messages, each ended by a NUL byte, written to the browser's
fd 3 and read from its fd 4), so nothing listens on a port.

:class:`Browser` opens a page, waits for its load event, and collects what its console said:
uncaught exceptions (``Runtime.exceptionThrown``), ``console.error`` calls and the browser's own
error log entries (a resource that failed to load, say).  It evaluates expressions in the page
and takes screenshots (``Page.captureScreenshot``) of the viewport wherever the page scrolled.
Debian's ``chromium`` (``./dev`` installs it).

    python tests/support/browser.py PAGE.html [SHOT.png]   prints load figures and errors
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--remote-debugging-pipe"]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _pipe_fds(commands: int, answers: int) -> None:
    """In the child before exec: ``commands`` becomes fd 3, ``answers`` fd 4 (both inheritable)."""
    import fcntl

    a = fcntl.fcntl(commands, fcntl.F_DUPFD, 10)
    b = fcntl.fcntl(answers, fcntl.F_DUPFD, 10)
    os.dup2(a, 3)
    os.dup2(b, 4)


class BrowserError(RuntimeError):
    pass


class Browser:
    def __init__(self, size: tuple[int, int] = (1400, 1000), timeout: float = 60.0):
        self.timeout = timeout
        self.profile = tempfile.TemporaryDirectory(prefix="chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # the child sees our pipe ends as its fds 3 (commands in) and 4 (answers out)
        self.proc = subprocess.Popen(
            [chromium(), *FLAGS, f"--window-size={size[0]},{size[1]}", f"--user-data-dir={self.profile.name}",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=False, preexec_fn=lambda: _pipe_fds(to_child_r, from_child_w))
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=size[0], height=size[1],
                  deviceScaleFactor=1, mobile=False)

    # -- the pipe ------------------------------------------------------------------------------
    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_child], [], [], left)[0]:
                raise BrowserError("chromium did not answer in time")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise BrowserError(f"chromium closed the pipe (exit {self.proc.poll()})")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, session: bool = False, **params) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            m = self._read(deadline)
            if m.get("id") == self._id:
                if "error" in m:
                    raise BrowserError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method: str) -> dict:
        deadline = time.monotonic() + self.timeout
        for i, m in enumerate(self.events):
            if m.get("method") == method:
                return self.events.pop(i)
        while True:
            m = self._read(deadline)
            if m.get("method") == method:
                return m
            self.events.append(m)

    # -- pages ---------------------------------------------------------------------------------
    def open(self, url: str) -> float:
        """Navigate and wait for the load event; the seconds it took."""
        self.events.clear()
        t0 = time.monotonic()
        r = self.call("Page.navigate", session=True, url=url)
        if "errorText" in r:
            raise BrowserError(f"{url}: {r['errorText']}")
        if r.get("loaderId"):  # none: a navigation within the document (a new #fragment)
            self.wait_event("Page.loadEventFired")
        return time.monotonic() - t0

    def eval(self, expression: str):
        r = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True,
                      awaitPromise=True)
        if "exceptionDetails" in r:
            raise BrowserError(f"{expression}: {r['exceptionDetails'].get('text')}")
        return r["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 10.0):
        """Evaluate ``expression`` until it is truthy (events such as hashchange run after
        Page.navigate returns); its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.eval(expression)
            if value or time.monotonic() > deadline:
                return value
            time.sleep(0.05)

    def errors(self) -> list[str]:
        """Uncaught exceptions, console.error calls and error log entries seen so far."""
        self.eval("0")  # let pending events arrive
        out = []
        for m in self.events:
            p = m.get("params", {})
            if m.get("method") == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                out.append(f"{d.get('text')} {(d.get('exception') or {}).get('description', '')}".strip())
            elif m.get("method") == "Runtime.consoleAPICalled" and p.get("type") == "error":
                out.append("console.error: " + " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            elif m.get("method") == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}".strip())
        return out

    def screenshot(self, png: Path) -> Path:
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        Path(png).write_bytes(base64.b64decode(data))
        return Path(png)

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except BrowserError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_child, self._from_child):
            os.close(fd)
        self.profile.cleanup()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


if __name__ == "__main__":
    page_path = Path(sys.argv[1]).resolve()
    with Browser() as b:
        secs = b.open(page_path.as_uri())
        ready = b.eval("document.documentElement.getAttribute('data-ready')")
        loaded = b.eval("document.documentElement.getAttribute('data-loaded')")
        nav = b.eval("JSON.stringify(performance.getEntriesByType('navigation')[0].toJSON())")
        nav = json.loads(nav)
        print(f"{page_path}: {page_path.stat().st_size:,} bytes; navigate to load event {secs * 1000:.0f} ms "
              f"(DOMContentLoaded at {nav['domContentLoadedEventEnd']:.0f} ms, load end {nav['loadEventEnd']:.0f} ms, "
              f"page script done at {ready} ms); errors: {b.errors() or 'none'}")
        if len(sys.argv) > 2:
            print(b.screenshot(Path(sys.argv[2])))
