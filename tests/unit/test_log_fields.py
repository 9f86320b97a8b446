"""Every ``extra=`` field a log call names is free in ``logging.LogRecord``: a field named like one of the record's
own attributes (``created``, ``message``, ``name``...) makes ``Logger.makeRecord`` raise KeyError, and only when
the level is enabled, so the call that fails is the one that runs with ``--log-level info`` in production. A
scale's "stream scaled" line once named ``created``, and every scale of a controller logging at info failed
after it was done."""

from __future__ import annotations

import ast
import logging
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("wire", "coordination", "controller_api", "clients", "controller", "server", "spark_io", "tributary")
RESERVED = set(vars(logging.LogRecord("n", logging.INFO, "p", 1, "m", None, None))) | {"message", "asctime"}


def literal_extra_keys(tree: ast.AST):
    """(line, key) of every string key of a dict literal passed as ``extra=`` to any call."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg == "extra" and isinstance(keyword.value, ast.Dict):
                    for key in keyword.value.keys:
                        if isinstance(key, ast.Constant) and isinstance(key.value, str):
                            yield key.lineno, key.value


def test_no_log_call_names_a_field_of_the_log_record_itself():
    clashes, checked = [], 0
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for line, key in literal_extra_keys(ast.parse(path.read_text(), str(path))):
                checked += 1
                if key in RESERVED:
                    clashes.append(f"{path.relative_to(ROOT)}:{line}: {key!r}")
    assert checked > 200  # the scan sees the codebase's log calls (247 fields when written)
    assert not clashes, "log fields that clash with LogRecord's own attributes:\n" + "\n".join(clashes)


def test_the_scan_finds_a_clash_and_logging_really_refuses_one():
    (found,) = [key for _, key in literal_extra_keys(ast.parse('log.info("x", extra={"created": 1, "ok": 2})'))
                if key in RESERVED]
    assert found == "created"
    logger = logging.getLogger("tests.log_fields")
    logger.setLevel(logging.INFO)
    try:
        logger.info("x", extra={"created": 1})
    except KeyError as error:
        assert "created" in str(error)
    else:
        raise AssertionError("logging accepted a field named like a LogRecord attribute")
