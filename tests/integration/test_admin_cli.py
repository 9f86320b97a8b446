"""`tributary admin` against a standalone's REST API: tables by default, the API's JSON with --json, one
clear line and exit status 1 when the API refuses or cannot be reached, 2 for bad options."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import click
import pytest

from tests.support.processes import free_port
from tests.support.sdk import sdk
from tests.support.standalone import StandaloneProcess
from tributary.admin import AdminError, resolve_segment

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """(REST base URL, controller URI) of a standalone serving the REST API."""
    port = free_port()
    standalone = StandaloneProcess(tmp_path_factory.mktemp("admin") / "data",
                                   extra_args=["--rest-port", str(port)]).start()
    try:
        yield f"http://127.0.0.1:{port}", standalone.controller_uri
    finally:
        standalone.remove_data()


@pytest.fixture(scope="module")
def rest(standalone):
    return standalone[0]


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


def test_segments_are_named_as_describe_shows_them_and_sizes_say_what_is_kept(standalone):
    """describe shows #4; --seal and --cut take 4, '#4' or the full id 8589934596, a number being looked up
    among the stream's segments (issue 24: '--seal 4' meant id 4, 'not active in epoch 1'). describe's
    sizes: start (the head after truncation), tail, and the bytes kept between."""
    rest, controller_uri = standalone
    admin(rest, "create-scope", "numbers")
    admin(rest, "create", "numbers/s", "--segments", "2")
    assert admin(rest, "scale", "numbers/s", "--seal", "1", "--range", "0.5:0.75", "--range", "0.75:1").returncode == 0
    # epoch 1: #0 (id 0), #2 (id 4294967298), #3 (id 4294967299)
    scaled = admin(rest, "scale", "numbers/s", "--seal", "#3", "--range", "0.75:0.9", "--range", "0.9:1")
    assert scaled.returncode == 0, scaled.stderr
    assert "#4       8589934596  2      0.7500 - 0.9000" in scaled.stdout, scaled.stdout
    scaled = admin(rest, "--json", "scale", "numbers/s", "--seal", "4", "--seal", "8589934597", "--range", "0.75:1")
    assert scaled.returncode == 0, scaled.stderr
    assert [segment["number"] for segment in json.loads(scaled.stdout)["segments"]] == [0, 2, 6]

    unknown = admin(rest, "scale", "numbers/s", "--seal", "4", "--range", "0.75:1")  # #4 is sealed now
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr == ("error: --seal 4: numbers/s has no segment #4 among its current segments "
                              "(#0 #2 #6)\n")
    assert admin(rest, "scale", "numbers/s", "--seal", "#x", "--range", "0.75:1").returncode == 2

    async def write() -> None:  # ten events of 92 bytes, 100 with their 8-byte headers, all to one segment
        async with sdk.connect(controller_uri) as client:
            async with client.create_writer("numbers", "s") as writer:
                await asyncio.gather(*[await writer.write(b"x" * 92, "key") for _ in range(10)])

    asyncio.run(write())
    sizes = {segment["number"]: segment for segment in
             json.loads(admin(rest, "--json", "describe", "numbers/s").stdout)["segments"]}
    [written] = [number for number, segment in sizes.items() if segment["tailOffset"]]
    cut = {0: 0, 2: 0, 6: 0, written: 400}
    truncated = admin(rest, "truncate", "numbers/s", *[arg for number, offset in cut.items()
                                                      for arg in ("--cut", f"#{number}={offset}")])
    assert truncated.returncode == 0, truncated.stderr
    lines = admin(rest, "describe", "numbers/s").stdout.splitlines()
    assert lines[lines.index("segment  start  tail  kept") + 2 + [0, 2, 6].index(written)].split() == \
        [f"#{written}", "400", "1000", "600"], lines
    assert sizes[written]["bytesKept"] == 1000 and "length" not in sizes[written]
    # a cut may name sealed segments: numbers are looked up in the whole history
    refused = admin(rest, "truncate", "numbers/s", "--cut", "1=0", "--cut", "0=0")
    assert refused.returncode == 1 and refused.stderr.startswith("error: InvalidStreamCut (400)"), refused.stderr
    unknown = admin(rest, "truncate", "numbers/s", "--cut", "9=0")
    assert unknown.returncode == 1
    assert unknown.stderr == "error: --cut 9: numbers/s has no segment #9 among its segments (#0 #1 #2 #3 #4 #5 #6)\n"


def test_a_segment_number_matching_two_ids_is_ambiguous():
    segments = [{"segmentId": 4, "number": 4}, {"segmentId": (1 << 32) | 4, "number": 4}]
    with pytest.raises(AdminError, match=r"segment #4 of a/b is ambiguous \(ids 4, 4294967300\); give the full id"):
        resolve_segment("4", "--seal", "a/b", segments, "current segments")
    assert resolve_segment("4294967300", "--seal", "a/b", segments, "current segments") == 4294967300
    with pytest.raises(click.BadParameter):
        resolve_segment(f"#{1 << 32}", "--seal", "a/b", segments, "current segments")


def test_errors_are_one_line_with_an_exit_status(rest):
    missing = admin(rest, "describe", "none/such")
    assert missing.returncode == 1 and missing.stderr.startswith("error: StreamNotFound (404)")
    assert admin(rest, "describe", "no-slash").returncode == 2
    assert admin(rest, "scale", "a/b", "--seal", "0", "--range", "half").returncode == 2
    unreachable = admin(f"http://127.0.0.1:{free_port()}", "scopes")
    assert unreachable.returncode == 1 and unreachable.stderr.startswith("error: cannot reach the REST API")
    assert "Traceback" not in missing.stderr + unreachable.stderr
