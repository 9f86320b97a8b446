"""Shared fixtures: one moto S3 server per session (started only if a test needs it) for the S3 Tier-2 tests."""

from __future__ import annotations

import pytest

from tests.support.s3_server import fresh_bucket, moto_server


@pytest.fixture(scope="session")
def moto_s3():
    with moto_server() as server:
        yield server


@pytest.fixture
def s3_bucket(moto_s3, monkeypatch):
    """``(endpoint_url, bucket)``: a fresh bucket, with dummy AWS credentials in the environment."""
    with fresh_bucket(moto_s3, monkeypatch) as endpoint_and_bucket:
        yield endpoint_and_bucket
