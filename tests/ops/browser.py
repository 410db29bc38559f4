"""A real headless Chromium driven over the Chrome DevTools Protocol, standard library only.

Chromium is started with ``--remote-debugging-pipe``: it reads protocol messages (JSON ending
in a NUL byte) on file descriptor 3 and writes replies on 4, so no WebSocket client, no
downloaded browser build and no open debugging port are needed.
"""

import base64
import contextlib
import json
import os
import shutil
import subprocess
import time

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--remote-debugging-pipe",
]


def find_chromium():
    """The system's Chromium (Debian's ``chromium`` package), or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(RuntimeError):
    pass


class Browser:
    def __init__(self, executable, profile_dir, shots_dir):
        self.shots_dir = shots_dir
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire_fds():  # runs in the child before exec: 3 and 4 are the protocol pipes
            # Copy to fresh numbers first: a pipe end may itself be 3 or 4, and dup2 onto the
            # same number would neither move it nor clear its close-on-exec flag.
            reader, writer = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(reader, 3)
            os.dup2(writer, 4)

        self.proc = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={profile_dir}", "about:blank"],
            preexec_fn=wire_fds,
            # Python's own descriptors are close-on-exec; the two dup2'd ones must survive.
            close_fds=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events = []

    def _read_message(self, deadline):
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise BrowserError("Chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise BrowserError("Chromium closed the protocol pipe")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def send(self, method, params=None, session=None, timeout=30.0):
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def new_page(self, width=1280, height=1000):
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})
        page = Page(self, session["sessionId"])
        page.send("Page.enable")
        page.send("Runtime.enable")
        page.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        return page

    def close(self):
        with contextlib.suppress(BrowserError, OSError):
            self.send("Browser.close", timeout=5)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


class Page:
    def __init__(self, browser, session):
        self.browser = browser
        self.session = session

    def send(self, method, params=None, timeout=30.0):
        return self.browser.send(method, params, session=self.session, timeout=timeout)

    def goto(self, url):
        self.send("Page.navigate", {"url": url})

    def eval(self, expression):
        """The value of a JavaScript expression (promises awaited)."""
        result = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression, timeout=30.0, message=None):
        """Poll a JavaScript expression until it is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.eval(expression)
            except BrowserError:
                value = None  # the page is navigating: ask again
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {message or expression}")
            time.sleep(0.1)

    def screenshot(self, name):
        """Save the page as redqueue-dashboard-<name>.png in the test's own directory (a temp
        dir: nothing is written to a fixed path another user or run could share)."""
        path = os.path.join(self.browser.shots_dir, f"redqueue-dashboard-{name}.png")
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        with open(path, "wb") as out:
            out.write(base64.b64decode(data["data"]))
        return path
