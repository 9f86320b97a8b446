"""The examples of docs/sdk.md run as printed: every ```python block of the guide is a complete
program defining ``async def main(uri)``, run here against a real `tributary standalone`; the
```python-fragment blocks at least parse; the configuration tables list every setting."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import pathlib
import re
import traceback

import pytest

from clients.config import ClientConfig, ReaderConfig, WriterConfig
from clients.reader.reader_group import ReaderGroupConfig
from tests.support.doc_blocks import Block, fenced_blocks
from tests.support.standalone import serve

pytestmark = pytest.mark.process

GUIDE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "sdk.md"
RUNNABLE = "python"
FRAGMENT = "python-fragment"
EXAMPLE_TIMEOUT_SECONDS = 30.0


def guide_blocks() -> list[Block]:
    return fenced_blocks(GUIDE)


RUNNABLE_BLOCKS = [block for block in guide_blocks() if block.language == RUNNABLE]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    yield from serve(tmp_path_factory, "sdk-guide", container_count=2)


def test_the_guide_has_runnable_examples_and_no_unmarked_code():
    """The guide's code is either runnable (```python, each defining ``async def main(uri)``) or a
    marked fragment, and there are at least 15 runnable examples with distinct titles."""
    blocks = guide_blocks()
    assert len(RUNNABLE_BLOCKS) >= 15, f"only {len(RUNNABLE_BLOCKS)} runnable examples in {GUIDE}"
    for block in blocks:
        assert block.language in (RUNNABLE, FRAGMENT, "text", ""), \
            f"{GUIDE}:{block.line}: unknown fence language {block.language!r}"
    for block in RUNNABLE_BLOCKS:
        tree = ast.parse(block.code, filename=f"{GUIDE}:{block.line}")
        mains = [node for node in tree.body if isinstance(node, ast.AsyncFunctionDef) and node.name == "main"]
        assert mains and [arg.arg for arg in mains[0].args.args] == ["uri"], \
            f"{GUIDE}:{block.line}: a runnable example must define `async def main(uri)`:\n{block.head()}"
    titles = [block.title for block in RUNNABLE_BLOCKS]
    assert len(titles) == len(set(titles)), f"two examples share a title: {titles}"


def test_fragments_parse():
    """Every ```python-fragment block is valid Python (top-level ``await`` and ``async with`` allowed)."""
    for block in guide_blocks():
        if block.language == FRAGMENT:
            try:
                compile(block.code, f"{GUIDE}:{block.line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            except SyntaxError as error:
                pytest.fail(f"{GUIDE}:{block.line}: fragment does not parse ({error}):\n{block.head()}")


def test_scopes_of_the_examples_are_their_own():
    """Each example creates scopes no other example uses, so they can share one server."""
    owner: dict[str, str] = {}
    for block in RUNNABLE_BLOCKS:
        created = set(re.findall(r"create_scope\(\"([^\"]+)\"\)|scope = \"([^\"]+)\"", block.code))
        for scope in {name for pair in created for name in pair if name}:
            assert owner.setdefault(scope, block.title) == block.title, \
                f"scope {scope} is created by both {owner[scope]!r} and {block.title!r}"


@pytest.mark.parametrize("block", RUNNABLE_BLOCKS, ids=[block.title for block in RUNNABLE_BLOCKS])
async def test_example_runs(standalone, block):
    """The example runs to its end against a real server (its asserts hold) within 30 s."""
    namespace = {"__name__": f"sdk_guide_line_{block.line}"}
    try:
        code = compile("\n" * (block.line - 1) + block.code, str(GUIDE), "exec")  # tracebacks name guide lines
        exec(code, namespace)
        await asyncio.wait_for(namespace["main"](standalone.controller_uri), EXAMPLE_TIMEOUT_SECONDS)
    except Exception:  # noqa: BLE001 - reported with the example it came from
        pytest.fail(f"the example at {GUIDE.name}:{block.line} failed:\n{block.head()}\n...\n\n"
                    f"{traceback.format_exc()}", pytrace=False)


@pytest.mark.parametrize("settings", [ClientConfig, WriterConfig, ReaderConfig, ReaderGroupConfig],
                         ids=lambda settings: settings.__name__)
def test_configuration_tables_list_every_setting(settings):
    """The guide's table of each settings class names every one of its fields, and nothing else."""
    text = GUIDE.read_text()
    heading = f"**`{settings.__name__}`**"
    assert heading in text, f"no table for {settings.__name__} in {GUIDE}"
    table = text.split(heading, 1)[1].split("\n\n", 2)[1]
    listed = re.findall(r"^\| `(\w+)` \|", table, flags=re.MULTILINE)
    assert listed == [field.name for field in dataclasses.fields(settings)]
