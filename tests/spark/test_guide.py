"""The examples of docs/spark.md and of the README's Spark section run as printed: every ```python
block there defines ``main(spark, controller)`` and runs here in the shared session against the real
standalone (in a scope of its own: the blocks' scope name is replaced)."""

from __future__ import annotations

import pathlib

import pytest

from tests.support.doc_blocks import fenced_blocks

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.spark


def blocks(path: pathlib.Path, section: str | None = None) -> list[tuple[str, str]]:
    """(title, code) of the runnable blocks of a document (of one ``## `` section of it, if given)."""
    return [(f"{path.name}: {block.title if block.title != f'line {block.line}' else block.code.splitlines()[0]}",
             block.code) for block in fenced_blocks(path, section) if block.language == "python"]


EXAMPLES = blocks(ROOT / "docs" / "spark.md") + blocks(ROOT / "README.md", "Spark")


def test_the_documents_have_examples():
    assert len(blocks(ROOT / "docs" / "spark.md")) >= 5
    assert len(blocks(ROOT / "README.md", "Spark")) >= 1


@pytest.mark.parametrize("title, code", EXAMPLES, ids=[title for title, _ in EXAMPLES])
def test_example_runs(spark, standalone, scope_name, title, code):
    namespace: dict = {}
    exec(compile(code.replace('"guide"', repr(scope_name)), title, "exec"), namespace)
    namespace["main"](spark, standalone.controller_uri)
