"""`tributary admin` against a standalone's REST API: tables by default, the API's JSON with --json, one
clear line and exit status 1 when the API refuses or cannot be reached, 2 for bad options."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.processes import free_port
from tests.support.standalone import StandaloneProcess


@pytest.fixture(scope="module")
def rest(tmp_path_factory):
    port = free_port()
    standalone = StandaloneProcess(tmp_path_factory.mktemp("admin") / "data",
                                   extra_args=["--rest-port", str(port)]).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        standalone.remove_data()


def admin(rest: str, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tributary", "admin", "--rest", rest, *arguments],
                          capture_output=True, text=True, timeout=120)


def test_a_stream_administered_from_the_command_line(rest):
    assert admin(rest, "create-scope", "cli").stdout == "created scope cli\n"
    created = admin(rest, "create", "cli/s", "--segments", "2", "--retention-size", "1000000", "--tag", "t")
    assert created.returncode == 0
    assert "stream cli/s: ACTIVE, epoch 0" in created.stdout and "retention: SIZE min 1000000" in created.stdout
    scaled = admin(rest, "scale", "cli/s", "--seal", "1", "--range", "0.5:0.75", "--range", "0.75:1")
    assert scaled.returncode == 0 and "epoch 1" in scaled.stdout and "0.7500 - 1.0000" in scaled.stdout
    listed = admin(rest, "--json", "streams", "cli")
    assert json.loads(listed.stdout) == {"streams": [{"scopeName": "cli", "streamName": "s"}]}
    described = admin(rest, "--json", "describe", "cli/s")
    assert [segment["number"] for segment in json.loads(described.stdout)["segments"]] == [0, 2, 3]
    truncated = admin(rest, "truncate", "cli/s", "--cut", "0=0", "--cut", "4294967298=0", "--cut", "4294967299=0")
    assert truncated.returncode == 0, truncated.stderr
    text = admin(rest, "describe", "cli/s").stdout
    assert "head: 0@0, 4294967298@0, 4294967299@0 (0 bytes truncated)" in text, text
    history = text.split("scaling history")[1].splitlines()
    assert history[3].split()[0] == "0" and history[3].endswith("created")
    assert history[4].split()[0] == "1" and history[4].endswith("sealed #1; created #2 #3"), history
    assert admin(rest, "scopes").stdout.splitlines()[2:] == ["cli"]
    refused = admin(rest, "delete", "cli/s")
    assert refused.returncode == 1 and refused.stderr == "error: StreamNotSealed (412): stream cli/s is ACTIVE, not sealed\n"
    assert admin(rest, "seal", "cli/s").stdout == "sealed cli/s\n"
    assert admin(rest, "delete", "cli/s").stdout == "deleted cli/s\n"
    assert admin(rest, "delete-scope", "cli").returncode == 0
    assert "segment store" in (cluster := admin(rest, "cluster").stdout) and "127.0.0.1:" in cluster


def test_errors_are_one_line_with_an_exit_status(rest):
    missing = admin(rest, "describe", "none/such")
    assert missing.returncode == 1 and missing.stderr.startswith("error: StreamNotFound (404)")
    assert admin(rest, "describe", "no-slash").returncode == 2
    assert admin(rest, "scale", "a/b", "--seal", "0", "--range", "half").returncode == 2
    unreachable = admin(f"http://127.0.0.1:{free_port()}", "scopes")
    assert unreachable.returncode == 1 and unreachable.stderr.startswith("error: cannot reach the REST API")
    assert "Traceback" not in missing.stderr + unreachable.stderr
