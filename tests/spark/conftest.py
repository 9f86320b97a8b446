"""One SparkSession (``local[2]``, see ``spark_io.session``) and one standalone Tributary for every
Spark test a worker of the run gets (pytest-xdist spreads them over the workers).

Sessions start one at a time across the workers (a file lock in the run's shared temporary directory):
several JVMs launched at once on this 2-core machine have failed to hand their gateway port to PySpark
(``JAVA_GATEWAY_EXITED``)."""

from __future__ import annotations

import fcntl
import itertools
import re

import pytest

from spark_io.session import local_session
from tests.support.standalone import serve

_names = itertools.count()


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    with (tmp_path_factory.getbasetemp().parent / "spark-session-start.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, once this JVM's gateway is up
        session = local_session(app="tributary-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def standalone(tmp_path_factory):
    yield from serve(tmp_path_factory, "spark-standalone")


@pytest.fixture
def scope_name(request) -> str:
    """A scope of this test's own (letters, digits and dashes)."""
    return re.sub(r"[^A-Za-z0-9-]+", "-", f"spark-{next(_names)}-{request.node.name[:30]}").rstrip("-")
