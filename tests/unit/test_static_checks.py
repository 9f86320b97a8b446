"""The static checks: ruff (lint) and mypy (types) are clean over the packages they cover.

Both read their settings, and the paths they cover, from pyproject.toml ([tool.ruff] include,
[tool.mypy] files); to cover another package, extend those lists there, not here. Both run as
the venv's own tools (``sys.executable -m ...``) with their caches (.ruff_cache, .mypy_cache),
so a run after a small change takes a second or two.

Also here: the declared field annotations of the wire commands (what type checkers see) agree
with the layouts the codec runs, field by field.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
import textwrap

import pytest

import wire
from wire import compiler
from wire.base import REGISTRY, WireValue

ROOT = pathlib.Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
COMMANDS_DIR = ROOT / "wire" / "commands"
TIMEOUT_SECONDS = 300


def _run(*arguments: str, cwd: pathlib.Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *arguments], cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT_SECONDS, check=False)


def _report(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit status {result.returncode}\n{result.stdout}{result.stderr}"


# ---------------------------------------------------------------------- the project is clean


@pytest.mark.static
def test_ruff_finds_nothing():
    """``ruff check`` over the configured paths (pyproject.toml [tool.ruff]) reports no finding."""
    result = _run("ruff", "check", "--output-format", "concise")
    assert result.returncode == 0, "ruff found problems (fix them, or run `ruff check --fix`):\n" + _report(result)


@pytest.mark.static
def test_mypy_finds_nothing():
    """``mypy`` over the configured files (pyproject.toml [tool.mypy]): strict for wire/, coordination/ and clients/."""
    result = _run("mypy")
    assert result.returncode == 0, "mypy found type errors:\n" + _report(result)


# ---------------------------------------------------------------------- the checks can fail


@pytest.mark.static
def test_ruff_reports_a_bad_file(tmp_path):
    """The same configuration, given a file with an unused import and an unsorted import block, fails."""
    bad = tmp_path / "bad_lint.py"
    bad.write_text("import sys\nimport os\n\nprint(os.sep)\n")
    result = _run("ruff", "check", "--no-cache", "--config", str(PYPROJECT), "--output-format", "concise",
                  str(bad))
    assert result.returncode == 1, _report(result)
    assert "F401" in result.stdout and "I001" in result.stdout, _report(result)


@pytest.mark.static
def test_mypy_reports_a_bad_file(tmp_path):
    """The same configuration (strict by default), given an ill-typed and an unannotated function, fails."""
    bad = tmp_path / "bad_types.py"
    bad.write_text(textwrap.dedent("""\
        def length(text: str) -> str:
            return len(text)


        def unannotated(value):
            return value
        """))
    result = _run("mypy", "--config-file", str(PYPROJECT), "--cache-dir", str(tmp_path / "cache"), str(bad))
    assert result.returncode == 1, _report(result)
    assert "[return-value]" in result.stdout and "[no-untyped-def]" in result.stdout, _report(result)


# ---------------------------------------------------------------------- wire: annotations and layouts agree


def _expected_annotation(kind: compiler.Kind) -> str:
    """The annotation a field of ``kind`` is declared with in wire/commands (see wire.base)."""
    if kind.name == "scalar":
        return "int"
    if kind.name == "bool":
        return "bool"
    if kind.name == "uuid":
        return "UUID"
    if kind.name == "utf":
        return "str"
    if kind.name in ("buffer", "rest", "event"):
        return "BytesLike"
    if kind.name == "list":
        return f"Sequence[{_expected_annotation(kind.inner)}]"
    if kind.name == "composite":
        return str(kind.value_class.__name__)
    if kind.name == "trailing":
        return _expected_annotation(kind.inner)
    raise AssertionError(f"unknown field kind {kind.name}")


def _declared_classes() -> dict[str, list[tuple[str, str]]]:
    """Every decorated class of wire/commands: its (field, annotation source) pairs, in order."""
    declared: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(COMMANDS_DIR.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and node.decorator_list:
                declared[node.name] = [(statement.target.id, ast.unparse(statement.annotation))
                                       for statement in node.body
                                       if isinstance(statement, ast.AnnAssign)
                                       and isinstance(statement.target, ast.Name)]
    return declared


def _value_classes() -> list[type[WireValue]]:
    composites = [value for value in vars(wire.commands).values()
                  if isinstance(value, type) and issubclass(value, WireValue) and value.FIELD_NAMES
                  and value not in REGISTRY.values()]
    return [*REGISTRY.values(), *composites]


@pytest.mark.parametrize("value_class", _value_classes(), ids=lambda value_class: value_class.__name__)
def test_wire_annotations_match_the_layout(value_class):
    """Each command and composite declares every field of its layout, in order, with the right type."""
    declared = _declared_classes()
    assert value_class.__name__ in declared, f"{value_class.__name__} is not declared in wire/commands"
    expected = [(name, _expected_annotation(kind)) for name, kind in zip(value_class.FIELD_NAMES,
                                                                         value_class.KINDS, strict=True)]
    assert declared[value_class.__name__] == expected


def test_the_compiler_refuses_annotations_that_disagree():
    """A class whose annotations name other fields than its layout (or lack a trailing default) is refused."""
    from wire.fields import I64, Trailing, Utf

    class Misnamed(wire.Reply):
        request_id: int
        segment_name: str

    with pytest.raises(TypeError, match="annotates the fields"):
        compiler.build(Misnamed, ("request_id" / I64, "segment" / Utf))

    class NoDefault(wire.Reply):
        request_id: int
        stack_trace: str

    with pytest.raises(TypeError, match="must default"):
        compiler.build(NoDefault, ("request_id" / I64, "stack_trace" / Trailing(Utf, "")))
