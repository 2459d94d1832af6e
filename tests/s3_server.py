"""A loopback S3 endpoint for tests: moto's S3 server in a child process.

:class:`S3Server` starts moto's server (werkzeug, threaded) on 127.0.0.1 at a free port below the
kernel's ephemeral range, waits until it answers, creates a bucket, and hands out
:class:`~loglake.segments.storage.Storage` objects and ``AWS_*`` environment variables for it.
Clients in the test process and in subprocesses (brokers, Spark Python workers) all talk real
HTTP to it. Stopping it terminates only the process it started (by its Popen handle).

Fidelity: moto answers ``PUT`` with ``If-None-Match: *`` (and ``If-Match``) with 412 when the
condition fails, but checks and stores in two steps without a lock, so two racing conditional
puts to one key could both succeed. The child wraps moto's WSGI app so requests carrying those
headers run one at a time, which makes put-if-absent atomic as on real S3; other requests stay
concurrent.

The ``s3_server`` fixture (session scope) is defined here; tests/conftest.py registers this module
as a plugin (``pytest_plugins = ["tests.s3_server", ...]``).

Thread-safety: start/stop from one thread; the accessors may be used from any thread.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import pytest

from loglake.dev.harness import wait_until
from loglake.dev.net import LOOPBACK, free_port_block
from loglake.segments.storage import Storage

ACCESS_KEY_ID = "testing"
SECRET_ACCESS_KEY = "testing"
REGION = "us-east-1"
DEFAULT_BUCKET = "loglake-test"

STARTUP_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0
START_ATTEMPTS = 3
"""A port found free can be taken before the child binds it; retry with another port."""

_SERVER_CODE = """
import sys, threading
from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication, MotoRequestHandler, create_backend_app)

app = DomainDispatcherApplication(create_backend_app)
conditional = threading.Lock()

def serialised_conditional_writes(environ, start_response):
    if "HTTP_IF_NONE_MATCH" in environ or "HTTP_IF_MATCH" in environ:
        with conditional:
            return list(app(environ, start_response))
    return app(environ, start_response)

run_simple(sys.argv[1], int(sys.argv[2]), serialised_conditional_writes, threaded=True,
           request_handler=MotoRequestHandler)
"""
"""Child program: moto's S3 app behind a lock for conditional requests (see module docstring)."""


class S3Server:
    """moto S3 server on a loopback port in a child process; use as a context manager."""

    def __init__(self, bucket: str = DEFAULT_BUCKET, *, region: str = REGION) -> None:
        self.bucket = bucket
        self.region = region
        self._proc: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._log_path: Path | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> S3Server:
        if self._proc is not None:
            raise RuntimeError("S3Server already started")
        self._tmp = tempfile.TemporaryDirectory(prefix="loglake-s3-")
        self._log_path = Path(self._tmp.name) / "moto.log"
        try:
            last_error: Exception | None = None
            for _ in range(START_ATTEMPTS):
                port = free_port_block(1)
                try:
                    self._spawn(port)
                    break
                except _PortTaken as exc:
                    last_error = exc
            else:
                raise RuntimeError(f"moto server did not start: {last_error}")
            self.create_bucket(self.bucket)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, port: int) -> None:
        assert self._log_path is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env["MOTO_PORT"] = str(port)
        with open(self._log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-c", _SERVER_CODE, LOOPBACK, str(port)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
            )
        self._proc, self._port = proc, port

        def answering() -> bool:
            if proc.poll() is not None:
                self._proc = None
                log_text = self.log_tail()
                if "Address already in use" in log_text:
                    raise _PortTaken(f"port {port} taken")
                raise RuntimeError(f"moto server exited with {proc.returncode}:\n{log_text}")
            with socket.create_connection((LOOPBACK, port), timeout=0.5):
                return True

        wait_until(answering, STARTUP_TIMEOUT_S,
                   lambda: f"moto server answering on port {port}:\n{self.log_tail()}",
                   interval=0.05, ignore=(OSError,))

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT_S)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
            self._log_path = None

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's combined stdout/stderr (for failure messages)."""
        if self._log_path is None or not self._log_path.exists():
            return ""
        return self._log_path.read_text(errors="replace")[-chars:]

    # -- accessors ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None or self._proc is None:
            raise RuntimeError("S3Server is not running")
        return self._port

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def url(self, prefix: str = "", bucket: str | None = None) -> str:
        """``s3://<bucket>/<prefix>`` (no trailing slash)."""
        path = prefix.strip("/")
        return f"s3://{bucket or self.bucket}" + (f"/{path}" if path else "")

    def options(self) -> dict[str, str]:
        """delta-rs style options for this endpoint with dummy credentials."""
        return {
            "aws_endpoint_url": self.endpoint_url,
            "aws_access_key_id": ACCESS_KEY_ID,
            "aws_secret_access_key": SECRET_ACCESS_KEY,
            "aws_region": self.region,
            "aws_allow_http": "true",
        }

    def storage(self, prefix: str = "", bucket: str | None = None) -> Storage:
        """A Storage for ``s3://<bucket>/<prefix>`` with explicit options for this endpoint."""
        return Storage.from_url(self.url(prefix, bucket), self.options())

    def env(self) -> dict[str, str]:
        """AWS_* variables pointing at this endpoint, to overlay on a subprocess environment.

        Overlay on a copy of ``os.environ`` without its ``AWS_*`` entries when a stray
        AWS_SESSION_TOKEN or AWS_PROFILE might be set there.
        """
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ENDPOINT_URL_S3": self.endpoint_url,
            "AWS_ALLOW_HTTP": "true",
        }

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name`` (idempotent)."""
        import boto3

        client = boto3.client(
            "s3", endpoint_url=self.endpoint_url, aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY, region_name=self.region,
        )
        try:
            if self.region == "us-east-1":
                client.create_bucket(Bucket=name)
            else:
                client.create_bucket(
                    Bucket=name, CreateBucketConfiguration={"LocationConstraint": self.region})
        except client.exceptions.BucketAlreadyOwnedByYou:
            pass
        finally:
            client.close()


class _PortTaken(RuntimeError):
    pass


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One moto S3 server for the test session; use unique prefixes per test."""
    with S3Server() as server:
        yield server
