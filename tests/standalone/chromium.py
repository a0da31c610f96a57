"""Headless Debian Chromium driven over the Chrome DevTools Protocol (a websocket, no webdriver).

Only what the page test needs: set a cookie, open a URL, read the DOM, take a full-page screenshot.
``tests/standalone/install_chromium.sh`` installs the browser.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Page:
    """One browser tab."""

    def __init__(self, ws_url: str) -> None:
        from websockets.sync.client import connect

        self._ws = connect(ws_url, max_size=64 * 1024 * 1024, open_timeout=20)
        self._ids = itertools.count(1)
        self._events: list[dict[str, Any]] = []

    def close(self) -> None:
        self._ws.close()

    def send(self, method: str, timeout: float = 30, **params: Any) -> dict[str, Any]:
        msg_id = next(self._ids)
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self._ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == msg_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))
            self._events.append(message)

    def wait_event(self, method: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self._events):
                if event.get("method") == method:
                    return dict(self._events.pop(i).get("params", {}))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {method} within {timeout}s")
            self._events.append(json.loads(self._ws.recv(timeout=remaining)))

    def set_cookie(self, url: str, name: str, value: str, *, http_only: bool = False) -> None:
        self.send("Network.enable")
        result = self.send("Network.setCookie", url=url, name=name, value=value, httpOnly=http_only, sameSite="Lax")
        if not result.get("success", True):
            raise RuntimeError(f"cookie {name} was not set")

    def open(self, url: str, timeout: float = 30) -> None:
        """Navigate and wait for the load event."""
        self.send("Page.enable")
        self._events.clear()
        self.send("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired", timeout=timeout)

    def js(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def wait_js(self, expression: str, timeout: float = 30) -> Any:
        """Poll ``expression`` until it is truthy."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.js(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"{expression} stayed falsy for {timeout}s")
            time.sleep(0.25)

    def text(self) -> str:
        return str(self.js("document.body ? document.body.innerText : ''"))

    def screenshot(self, path: Path, width: int = 1280) -> None:
        """A PNG of the whole page at ``width`` CSS pixels."""
        height = int(self.js("Math.ceil(document.documentElement.scrollHeight)") or 800)
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))


class Chromium:
    """A headless Chromium process with a fresh profile; use as a context manager."""

    def __init__(self, binary: str, width: int = 1280, height: int = 900) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="slurmapi-chromium-"))
        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self.profile}", f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.port = self._devtools_port()
        self._pages: list[Page] = []

    def _devtools_port(self, timeout: float = 30) -> int:
        marker = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            if marker.exists():
                lines = marker.read_text().splitlines()
                if lines and lines[0].strip().isdigit():
                    return int(lines[0])
            time.sleep(0.1)
        raise TimeoutError("chromium did not open its DevTools port")

    def new_page(self) -> Page:
        reply = requests.put(f"http://127.0.0.1:{self.port}/json/new?about:blank", timeout=10)
        reply.raise_for_status()
        page = Page(reply.json()["webSocketDebuggerUrl"])
        self._pages.append(page)
        return page

    def close(self) -> None:
        for page in self._pages:
            with contextlib.suppress(Exception):
                page.close()
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
