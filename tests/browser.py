"""A headless Chromium (Debian's package) driven over the DevTools protocol, for tests of pages:
log in with a cookie, open a page, read what is on screen, click, accept confirm dialogs, take a
full-page screenshot. No browser download and no Node: the websockets client is in the lock file."""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

CHROMIUM_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1400,1000", "--remote-debugging-port=0"]


def chromium_path() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError("chromium is not installed: scripts/setup.sh installs Debian's chromium package")


class Browser:
    def __init__(self) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="cdcflow-chromium-"))
        self.proc = subprocess.Popen([chromium_path(), *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}",
                                      "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or len(port_file.read_text().split()) < 2:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read().decode(errors="replace")[-2000:] if self.proc.stderr else ""
                raise RuntimeError(f"chromium did not start: {err}")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
        page = next(t for t in targets if t["type"] == "page")
        self.ws = connect(page["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024, open_timeout=10)
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []
        self.dialogs: list[str] = []
        for domain in ("Page", "Network", "Runtime"):
            self.call(f"{domain}.enable")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self.ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._event(msg)

    def _event(self, msg: dict[str, Any]) -> None:
        self.events.append(msg)
        if msg.get("method") == "Page.javascriptDialogOpening":
            self.dialogs.append(msg["params"]["message"])
            self.ws.send(json.dumps({"id": next(self.ids), "method": "Page.handleJavaScriptDialog",
                                     "params": {"accept": True}}))

    def wait_event(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            except TimeoutError:
                break
            self._event(msg)
            if msg.get("method") == method:
                return msg
        raise TimeoutError(f"no {method} within {timeout}s")

    def set_cookie(self, url: str, name: str, value: str) -> None:
        self.call("Network.setCookie", name=name, value=value, url=url)

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")

    def eval(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def text(self, selector: str = "body") -> str:
        return str(self.eval(f"document.querySelector({json.dumps(selector)}).innerText"))

    def url(self) -> str:
        return str(self.eval("location.href"))

    def screenshot(self, path: Path, selector: str | None = None) -> Path:
        """The full page, or the element ``selector`` matches (with a small margin)."""
        if selector is not None:
            box = self.eval(f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
                            ".getBoundingClientRect(); return [r.left + scrollX, r.top + scrollY, r.width, r.height]; })()")
            clip = {"x": max(box[0] - 8, 0), "y": max(box[1] - 8, 0), "width": box[2] + 16, "height": box[3] + 16}
        else:
            metrics = self.call("Page.getLayoutMetrics")
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 6000)}
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip={**clip, "scale": 1})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            shutil.rmtree(self.profile, ignore_errors=True)
