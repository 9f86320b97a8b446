"""The CLI's Tier-2 options: an unusable S3 Tier-2 or a missing bucket is a clear error with a non-zero exit."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.processes import free_port

pytestmark = pytest.mark.process


def run(tmp_path, *args) -> subprocess.CompletedProcess:
    env = dict(os.environ, AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test", AWS_MAX_ATTEMPTS="1")
    return subprocess.run([sys.executable, "-m", "tributary", "segmentstore", "--data-dir", str(tmp_path / "data"),
                           "--port", str(free_port()), *args], capture_output=True, text=True, timeout=120, env=env)


def test_unreachable_s3_tier2_fails_start_with_a_clear_error(tmp_path):
    closed = free_port()  # nothing listens there
    result = run(tmp_path, "--tier2", "s3", "--s3-bucket", "missing", "--s3-endpoint", f"http://127.0.0.1:{closed}")
    assert result.returncode == 1
    assert "tier-2 (s3) is not usable" in result.stderr
    assert "Traceback" not in result.stderr


def test_s3_tier2_without_a_bucket_is_a_usage_error(tmp_path):
    result = run(tmp_path, "--tier2", "s3")
    assert result.returncode == 2
    assert "an S3 Tier-2 needs a bucket" in result.stderr


def test_s3_without_credentials_is_one_clear_line(tmp_path):
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    env.update(HOME=str(tmp_path), AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"), AWS_EC2_METADATA_DISABLED="true")
    result = subprocess.run([sys.executable, "-m", "tributary", "segmentstore", "--data-dir", str(tmp_path / "data"),
                             "--port", str(free_port()), "--tier2", "s3", "--s3-bucket", "b",
                             "--s3-endpoint", f"http://127.0.0.1:{free_port()}"],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 1
    assert "tier-2 (s3) has no credentials" in result.stderr and "Traceback" not in result.stderr


def test_an_s3_endpoint_that_is_not_a_url_is_one_clear_line(tmp_path):
    result = run(tmp_path, "--tier2", "s3", "--s3-bucket", "b", "--s3-endpoint", "notaurl")
    assert result.returncode == 1
    assert "--s3-endpoint 'notaurl' is not an http(s) URL" in result.stderr and "Traceback" not in result.stderr


def test_an_unusable_tier2_dir_is_named_as_such(tmp_path):
    (tmp_path / "a-file").write_text("")
    result = run(tmp_path, "--tier2-dir", str(tmp_path / "a-file" / "tier2"))
    assert result.returncode == 1
    assert f"tier-2 dir {tmp_path / 'a-file' / 'tier2'} is not usable" in result.stderr
    assert "Traceback" not in result.stderr
