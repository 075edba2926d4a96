"""Debian's Chromium, headless, driven over the DevTools protocol (JSON over a WebSocket, with
aiohttp): enough to open a page, read it with JavaScript and take a screenshot. It drives the
live dashboard's test and `ksp demo greenhouse --screenshot`; a browser automation library
would download its own browser, which this project does not do.

    async with Browser() as browser:
        page = await browser.open("http://127.0.0.1:8000/dashboard")
        await page.wait_for("document.title")
"""
from __future__ import annotations

import asyncio
import base64
import itertools
import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

#: As the machine's notes advise: no sandbox (root), no GPU, and none of Chromium's own
#: network traffic (refused here, and slow to fail at every start).
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--hide-scrollbars", "--mute-audio")


class BrowserError(RuntimeError):
    """Chromium missing, not starting, or a page's script failing: in words."""


class Browser:
    def __init__(self, executable: str | None = None, width: int = 1100,
                 height: int = 700) -> None:
        self.executable = executable or shutil.which("chromium") or shutil.which(
            "chromium-browser")
        if self.executable is None:
            raise BrowserError("no chromium: Debian's package `chromium` (scripts/"
                               "apt-packages.txt, installed by scripts/_env.sh)")
        self.size = (width, height)
        self.proc: asyncio.subprocess.Process | None = None
        self.http: aiohttp.ClientSession | None = None
        self.devtools = ""
        self.pages: list[Page] = []

    async def __aenter__(self) -> "Browser":
        self._profile = tempfile.TemporaryDirectory(prefix="ksp-chromium-")
        self.proc = await asyncio.create_subprocess_exec(
            self.executable, *FLAGS, f"--user-data-dir={self._profile.name}",
            f"--window-size={self.size[0]},{self.size[1]}", "--remote-debugging-port=0",
            "about:blank", stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        said = []
        try:
            async with asyncio.timeout(60):
                while True:
                    line = (await self.proc.stderr.readline()).decode(errors="replace")
                    if not line:
                        raise BrowserError("chromium ended at start:\n" + "".join(said))
                    said.append(line)
                    m = re.search(r"DevTools listening on (ws://[^\s]+)", line)
                    if m:
                        self.devtools = m[1]
                        break
        except BaseException:
            await self.__aexit__()
            raise
        self._drain = asyncio.create_task(self._drain_stderr())
        self.http = aiohttp.ClientSession()
        return self

    async def _drain_stderr(self) -> None:
        while await self.proc.stderr.readline():
            pass

    async def open(self, url: str) -> "Page":
        """A new tab at `url` (its load is not awaited: use `Page.wait_for`)."""
        host = re.match(r"ws://([^/]+)/", self.devtools)[1]
        async with self.http.put(f"http://{host}/json/new?about:blank") as r:
            target = await r.json(content_type=None)
        page = Page(await self.http.ws_connect(target["webSocketDebuggerUrl"],
                                               max_msg_size=64 << 20))
        self.pages.append(page)
        await page.send("Emulation.setDeviceMetricsOverride", width=self.size[0],
                        height=self.size[1], deviceScaleFactor=1, mobile=False)
        await page.send("Page.navigate", url=url)
        return page

    async def __aexit__(self, *exc) -> None:
        for page in self.pages:
            await page.ws.close()
        if self.http is not None:
            await self.http.close()
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except asyncio.TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if getattr(self, "_drain", None) is not None:
            self._drain.cancel()
        self._profile.cleanup()


class Page:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._ids = itertools.count(1)

    async def send(self, method: str, **params) -> dict:
        """One DevTools command and its result (events in between are skipped)."""
        ident = next(self._ids)
        await self.ws.send_json({"id": ident, "method": method, "params": params})
        while True:
            msg = await self.ws.receive(60)
            if msg.type != aiohttp.WSMsgType.TEXT:
                raise BrowserError(f"DevTools connection ended ({msg.type.name})")
            data = json.loads(msg.data)
            if data.get("id") == ident:
                if "error" in data:
                    raise BrowserError(f"{method}: {data['error'].get('message')}")
                return data.get("result", {})

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited if a promise)."""
        result = await self.send("Runtime.evaluate", expression=expression,
                                 returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise BrowserError(details.get("exception", {}).get("description")
                               or details.get("text", "script failed"))
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout: float = 30.0,
                       interval: float = 0.05) -> Any:
        """The expression's first truthy value, polled; a timeout says what was last seen."""
        seen = None
        try:
            async with asyncio.timeout(timeout):
                while True:
                    try:
                        seen = await self.evaluate(expression)
                    except BrowserError as exc:  # the page is still loading
                        seen = exc
                    else:
                        if seen:
                            return seen
                    await asyncio.sleep(interval)
        except TimeoutError:
            raise BrowserError(f"not within {timeout} s: {expression} (last: {seen!r})") from None

    async def screenshot(self, path: str | Path) -> Path:
        data = await self.send("Page.captureScreenshot", format="png")
        path = Path(path)
        path.write_bytes(base64.b64decode(data["data"]))
        return path
