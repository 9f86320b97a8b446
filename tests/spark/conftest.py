"""One SparkSession (``local[2]``, see ``spark_io.session``) and one standalone Tributary for every
Spark test of the run."""

from __future__ import annotations

import itertools
import re

import pytest

from spark_io.session import local_session
from tests.support.standalone import serve

_names = itertools.count()


@pytest.fixture(scope="session")
def spark():
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
