"""Every command the documents print works as written.

Each fenced block of docs/*.md and of the README says what it holds: ```shell (commands a reader types),
```text (output, diagrams, layouts), ```python / ```python-fragment (run or parsed by the guides' own tests:
tests/integration/test_sdk_guide.py, tests/spark/test_guide.py), ```json, ```yaml. The ```shell blocks of each
document run in order in a scratch directory (tests/support/docs_runner.py says how servers, prompts and
``pip install`` are handled), in a network namespace of their own where the machine allows one, so the
documents' fixed ports (9090, 12345, 2181 ...) are free; otherwise on this machine's loopback, one document
at a time.

The README's own shell blocks (``./dev.sh ...``, which set up the machine) are not run here: CI runs
``./dev.sh test`` itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import pathlib
import subprocess
import sys

import pytest

from tests.support.doc_blocks import fenced_blocks

pytestmark = [pytest.mark.timeout(600), pytest.mark.process]

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCUMENTS = sorted((ROOT / "docs").glob("*.md"))
README = ROOT / "README.md"
LANGUAGES = {"shell", "text", "python", "python-fragment", "json", "yaml"}
RUN_SECONDS_MAX = 540
HOST_LOCK = pathlib.Path("/tmp/tributary-docs-commands.lock")  # documents on the host's loopback: one at a time


def shell_documents() -> list[pathlib.Path]:
    return [document for document in DOCUMENTS if any(block.language == "shell" for block in fenced_blocks(document))]


@functools.cache
def own_network_namespace() -> bool:
    """Whether this machine lets the test run a document in a network namespace of its own."""
    try:
        return subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@contextlib.contextmanager
def host_loopback():
    with HOST_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def test_every_block_says_what_it_holds():
    """An untagged block is neither run nor checked: every block names its language, and text blocks hold no
    commands (a ``tributary`` or ``$`` line there is a command nobody tests)."""
    for document in [*DOCUMENTS, README]:
        for block in fenced_blocks(document):
            assert block.language in LANGUAGES, f"{block.where}: fence language {block.language!r} is not one " \
                                                f"of {sorted(LANGUAGES)}:\n{block.head()}"
            if block.language == "text":
                commands = [line for line in block.code.splitlines()
                            if line.lstrip().startswith("$ ") or (line.lstrip().startswith("tributary ") and " -" in line)]
                assert not commands, f"{block.where}: commands in a text block (make it a shell block): {commands}"


def test_the_documents_have_commands_to_run():
    names = {document.name for document in shell_documents()}
    assert {"security.md", "rest.md", "cluster.md", "loadgen.md", "spark.md"} <= names, names


@pytest.mark.parametrize("document", shell_documents(), ids=lambda document: document.name)
def test_the_commands_of_a_document_work_as_written(document, tmp_path):
    command = [sys.executable, "-m", "tests.support.docs_runner", str(document), str(tmp_path / "work")]
    if own_network_namespace():
        context: contextlib.AbstractContextManager = contextlib.nullcontext()
        command = ["unshare", "--net", *command, "--loopback-up"]
    else:
        context = host_loopback()
    with context:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=RUN_SECONDS_MAX)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"the runner printed no result (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    result = json.loads(lines[-1])
    assert result["ok"], result["error"]
