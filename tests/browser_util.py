"""End-to-end console tests in a real browser: a real ``loglake console`` process and headless
Chromium driven by Playwright.

* :class:`ConsoleProcess` — ``python -m loglake console --host 127.0.0.1 --port 0`` started by
  the test against a cluster's ZooKeeper (with its chroot); the URL is read from the line the
  console prints once it listens (``console: http://HOST:PORT/``), then ``/healthz`` must answer.
  Its output goes to ``console.log`` in the given folder; :meth:`ConsoleProcess.stop` sends
  SIGTERM to the one process it started, SIGKILL after a bound.
* :func:`chromium_path` — the system's Chromium (``LOGLAKE_CHROMIUM`` overrides; the
  ``chromium`` / ``chromium-browser`` on ``PATH`` otherwise). Playwright never downloads a
  browser here: it is launched with ``executable_path`` and ``--no-sandbox``.
* Fixtures (import them into a test module with ``# noqa: F401``; they are registered under
  the names in ``name=``): ``browser`` (module scope: one Chromium per test module), ``page``
  (a fresh browser context and page per test, 15 s default timeout; JavaScript errors on the
  page are collected in ``page.errors`` — a :class:`BrowserPage` — and fail the test at
  teardown, so a broken htmx swap or script shows up as a failure).
* :func:`screenshot` — a full-page PNG under :func:`screenshot_dir`: ``$LOGLAKE_SCREENSHOT_DIR``
  if set, else ``tests/.artifacts/screenshots/<run stamp>/`` (git-ignored; nothing is
  committed). Each test module's run writes into one folder per process start.

Waiting: every check that depends on the cluster or on an htmx refresh waits with a bound
(Playwright's auto-waiting ``expect`` or ``wait_until``), never a fixed sleep.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import pytest

from loglake.dev.harness import wait_until

CONSOLE_START_TIMEOUT_S = 60.0
"""Bound for the console process to print its URL and answer ``/healthz`` (a loaded box)."""
CONSOLE_STOP_TIMEOUT_S = 10.0
PAGE_TIMEOUT_MS = 15_000
"""Playwright's default bound for each action and ``expect`` on a page."""

_URL_LINE = re.compile(r"console: (https?://\S+?)/?\s")
_REPO = Path(__file__).resolve().parent.parent
_RUN_STAMP = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"


def chromium_path() -> str | None:
    """The Chromium binary to drive, or None when the machine has none."""
    configured = os.environ.get("LOGLAKE_CHROMIUM")
    if configured:
        return configured
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def screenshot_dir() -> Path:
    """Where this run's screenshots go (created on first use)."""
    configured = os.environ.get("LOGLAKE_SCREENSHOT_DIR")
    path = Path(configured) if configured else (
        _REPO / "tests" / ".artifacts" / "screenshots" / _RUN_STAMP)
    path.mkdir(parents=True, exist_ok=True)
    return path


def screenshot(page: Any, name: str) -> Path:
    """Save a full-page screenshot of ``page`` as ``<name>.png``; return its path."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "page"
    path = screenshot_dir() / f"{safe}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


class ConsoleProcess:
    """One ``loglake console`` process on a free loopback port (see the module)."""

    def __init__(self, zookeeper: str, log_dir: Path, *, bootstrap: str | None = None,
                 extra_args: tuple[str, ...] = (), verify: ssl.SSLContext | bool = True
                 ) -> None:
        self.zookeeper = zookeeper
        self.verify = verify  # httpx's: a CA file for a console on HTTPS
        self.bootstrap = bootstrap
        self.extra_args = extra_args
        self.log_path = Path(log_dir) / "console.log"
        self.url = ""
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> ConsoleProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-m", "loglake", "console", "--zookeeper", self.zookeeper,
                "--host", "127.0.0.1", "--port", "0", *self.extra_args]
        if self.bootstrap:
            args += ["--bootstrap-server", self.bootstrap]
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=str(_REPO), env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            match: str = wait_until(self._printed_url, CONSOLE_START_TIMEOUT_S,
                               lambda: f"the console did not print its URL:\n{self.log()}")
            self.url = match.rstrip("/")
            wait_until(self._healthy, CONSOLE_START_TIMEOUT_S,
                       lambda: f"the console's /healthz did not answer:\n{self.log()}",
                       ignore=(httpx.HTTPError,))
        except BaseException:
            self.stop()
            raise
        return self

    def _printed_url(self) -> str:
        if self._process is not None and self._process.poll() is not None:
            raise AssertionError(f"the console exited with {self._process.returncode}:\n"
                                 f"{self.log()}")
        found = _URL_LINE.search(self.log())
        return found.group(1) if found else ""

    def _healthy(self) -> bool:
        return httpx.get(f"{self.url}/healthz", timeout=5.0, verify=self.verify).text == "ok"

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log(self) -> str:
        """Everything the console printed so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        """SIGTERM the process this object started; SIGKILL it after the bound."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=CONSOLE_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=CONSOLE_STOP_TIMEOUT_S)

    def __enter__(self) -> ConsoleProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


@dataclass
class BrowserPage:
    """A Playwright page plus what went wrong in it (JavaScript errors, failed htmx swaps)."""

    page: Any
    base_url: str = ""
    errors: list[str] = field(default_factory=list)

    def goto(self, path: str) -> Any:
        """Open ``path`` of the console; return the navigation response."""
        return self.page.goto(self.base_url + path, wait_until="load")


@pytest.fixture(scope="module", name="browser")
def _browser_fixture() -> Iterator[Any]:
    """One headless Chromium per test module (skipped when the machine has no Chromium)."""
    executable = chromium_path()
    if executable is None:
        pytest.skip("no Chromium on this machine (install Debian's chromium, or set "
                    "LOGLAKE_CHROMIUM)")
    from playwright.sync_api import sync_playwright  # imported here: only when Chromium exists

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
        try:
            yield browser
        finally:
            with contextlib.suppress(Exception):
                browser.close()


@pytest.fixture(name="page")
def _page_fixture(browser: Any) -> Iterator[BrowserPage]:
    """A fresh context and page; JavaScript errors on it fail the test."""
    from playwright.sync_api import expect

    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    expect.set_options(timeout=PAGE_TIMEOUT_MS)
    page = context.new_page()
    wrapped = BrowserPage(page)
    page.on("pageerror", lambda exc: wrapped.errors.append(f"page error: {exc}"))
    page.on("console", lambda msg: wrapped.errors.append(f"console error: {msg.text}")
            if msg.type == "error" and not _expected_console_error(msg.text) else None)
    try:
        yield wrapped
    finally:
        with contextlib.suppress(Exception):
            context.close()
    assert not wrapped.errors, "errors in the browser:\n" + "\n".join(wrapped.errors)


_EXPECTED_ERRORS = re.compile(
    r"Failed to load resource: the server responded with a status of [45]\d\d"
    r"|Response Status Error Code [45]\d\d")


def _expected_console_error(text: str) -> bool:
    """Browser console lines that are expected: a 4xx/5xx answer the test provoked on purpose
    (the browser logs "Failed to load resource" for it; htmx logs "Response Status Error
    Code" for a refused form or a failing polled fragment). Anything else — a script error,
    htmx calling a 2xx answer an error — fails the test."""
    return bool(_EXPECTED_ERRORS.search(text))
