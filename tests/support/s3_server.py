"""A moto S3 server for tests: ``python -m moto.server`` on a free loopback port, stopped by its PID.

Start it once per session (``moto_server()``; startup takes about a second) and give each test a
fresh bucket with ``fresh_bucket(server, monkeypatch)``, which also points botocore's default
credential chain at dummy credentials so that clients need no configuration.

moto's minimum multipart part size is lowered to ``MIN_PART_SIZE`` so that tests can exercise
both kinds of concat parts (server-side copies and re-uploads) with small chunks: give
``S3ChunkStorage`` the same ``min_part_size``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

from .processes import free_port, terminate_process, wait_until_ready

MIN_PART_SIZE = 4096
DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                     "AWS_DEFAULT_REGION": "us-east-1"}


class MotoServer:
    def __init__(self):
        self.port = free_port()
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> "MotoServer":
        env = dict(os.environ, S3_UPLOAD_PART_MIN_SIZE=str(MIN_PART_SIZE), **DUMMY_CREDENTIALS)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until_ready(self.process, lambda: self._request("GET", "/moto-api/data.json"),
                         f"moto.server on port {self.port}", timeout)
        return self

    def stop(self) -> None:
        terminate_process(self.process, timeout=10)

    def create_bucket(self) -> str:
        """A new, empty bucket (moto checks no signatures, so a bare PUT will do)."""
        bucket = f"test-{uuid.uuid4().hex[:24]}"
        self._request("PUT", f"/{bucket}")
        return bucket

    def reset(self) -> None:
        """Forgets every bucket and object."""
        self._request("POST", "/moto-api/reset")

    def _request(self, method: str, path: str) -> None:
        request = urllib.request.Request(self.endpoint_url + path, method=method)
        with urllib.request.urlopen(request, timeout=5) as response:
            response.read()


@contextlib.contextmanager
def moto_server() -> Iterator[MotoServer]:
    server = MotoServer()
    try:
        yield server.start()
    finally:
        server.stop()


def use_dummy_credentials(monkeypatch) -> None:
    """Botocore's default chain then finds dummy keys and reads no user configuration."""
    for variable, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(variable, value)
    for variable in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@contextlib.contextmanager
def fresh_bucket(server: MotoServer, monkeypatch) -> Iterator[tuple[str, str]]:
    """Yields ``(endpoint_url, bucket)``; the server forgets everything afterwards."""
    use_dummy_credentials(monkeypatch)
    try:
        yield server.endpoint_url, server.create_bucket()
    finally:
        server.reset()
