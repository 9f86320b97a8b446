"""A server given a bad TLS file stops at once (issue 24): exit status 1 and one line on stderr naming the file
and what is wrong with it, where OpenSSL said ``[SSL] PEM lib``; nothing is started (the data dir is not even
made). Real `tributary` processes, real certificates (tests/support/certs.py)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.support.certs import make_certificates
from tests.support.processes import free_port

pytestmark = pytest.mark.process

PROMPT = 10.0  # seconds: interpreter start and imports only


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    home = tmp_path_factory.mktemp("tls-startup")
    ours, theirs = make_certificates(home / "ours"), make_certificates(home / "theirs")
    garbage = home / "garbage.pem"
    garbage.write_text("this is not a certificate\n")
    return {"cert": ours.certificate, "key": ours.key, "ca": ours.ca, "other_key": theirs.key, "garbage": garbage}


def run(tmp_path, command: str, *args) -> tuple[int, list[str]]:
    """Runs `tributary COMMAND ARGS` and returns its exit status and stderr lines (checked to come promptly)."""
    started = time.monotonic()
    ports = (["--data-dir", str(tmp_path / "data"), "--port", str(free_port())] if command != "controller"
             else ["--port", str(free_port())])
    if command == "standalone":
        ports += ["--controller-port", str(free_port())]
    result = subprocess.run([sys.executable, "-m", "tributary", command, *ports, *map(str, args)],
                            capture_output=True, text=True, timeout=60)
    assert time.monotonic() - started < PROMPT
    assert not (tmp_path / "data").exists()
    return result.returncode, result.stderr.splitlines()


def test_standalone_with_a_garbage_certificate(files, tmp_path):
    status, stderr = run(tmp_path, "standalone", "--tls-cert", files["garbage"], "--tls-key", files["key"])
    assert (status, stderr) == (1, [f"error: TLS certificate {files['garbage']}: not a PEM file "
                                    "(no '-----BEGIN ...-----' block; it is text)"])


def test_standalone_with_a_key_that_does_not_match_the_certificate(files, tmp_path):
    status, stderr = run(tmp_path, "standalone", "--tls-cert", files["cert"], "--tls-key", files["other_key"])
    assert (status, stderr) == (1, [f"error: TLS private key {files['other_key']}: does not match the certificate "
                                    f"in {files['cert']}"])


def test_standalone_with_certificate_and_key_swapped(files, tmp_path):
    status, stderr = run(tmp_path, "standalone", "--tls-cert", files["key"], "--tls-key", files["cert"])
    assert (status, stderr) == (1, [f"error: TLS certificate {files['key']}: no certificate in it "
                                    "(it holds PRIVATE KEY)"])


def test_standalone_with_a_garbage_trust_file(files, tmp_path):
    status, stderr = run(tmp_path, "standalone", "--tls-cert", files["cert"], "--tls-key", files["key"],
                         "--tls-trust", files["garbage"])
    assert (status, stderr) == (1, [f"error: trusted certificates {files['garbage']}: not a PEM file "
                                    "(no '-----BEGIN ...-----' block; it is text)"])


def test_segment_store_with_a_garbage_key(files, tmp_path):
    status, stderr = run(tmp_path, "segmentstore", "--tls-cert", files["cert"], "--tls-key", files["garbage"])
    assert (status, stderr) == (1, [f"error: TLS private key {files['garbage']}: not a PEM file "
                                    "(no '-----BEGIN ...-----' block; it is text)"])


def test_controller_with_a_key_as_its_trust_file(files, tmp_path):
    status, stderr = run(tmp_path, "controller", "--tls-cert", files["cert"], "--tls-key", files["key"],
                         "--tls-trust", files["key"], "--wait", "0")
    assert (status, stderr) == (1, [f"error: trusted certificates {files['key']}: no certificate in it "
                                    "(it holds PRIVATE KEY)"])
