"""Shared fixtures: one moto S3 server and one ZooKeeper per session (each started only if a test needs it);
the cost markers of every test (tests/support/costs.py)."""

from __future__ import annotations

import pytest

from server.tier1 import MEMORY_LOGS
from tests.support.costs import ProcessGuard, mark_costs
from tests.support.s3_server import fresh_bucket, moto_server
from tests.support.zookeeper import fresh_chroot, zookeeper_server

_PROCESS_GUARD = ProcessGuard()


def pytest_configure(config):
    _PROCESS_GUARD.install()


def pytest_unconfigure(config):
    _PROCESS_GUARD.uninstall()


def pytest_collection_modifyitems(config, items):
    mark_costs(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _PROCESS_GUARD.enter(item)
    try:
        return (yield)
    finally:
        _PROCESS_GUARD.leave()


@pytest.fixture(scope="session")
def moto_s3():
    with moto_server() as server:
        yield server


@pytest.fixture
def s3_bucket(moto_s3, monkeypatch):
    """``(endpoint_url, bucket)``: a fresh bucket, with dummy AWS credentials in the environment."""
    with fresh_bucket(moto_s3, monkeypatch) as endpoint_and_bucket:
        yield endpoint_and_bucket


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """A real ZooKeeper (Debian's) on a loopback port, for the whole session; stopped by PID."""
    with zookeeper_server(tmp_path_factory.mktemp("zookeeper")) as server:
        yield server


@pytest.fixture
def zk_hosts(zookeeper) -> str:
    """A connect string with a fresh, empty chroot: the test's own corner of the shared ZooKeeper."""
    return fresh_chroot(zookeeper)


@pytest.fixture(autouse=True)
def _forget_memory_logs():
    """In-memory Tier-1 logs (the in-process stores' default) live for one test: memory stays bounded."""
    yield
    MEMORY_LOGS.forget()
