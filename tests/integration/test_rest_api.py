"""The controller's REST admin API against a real standalone (``--rest-port``): every route against its
OpenAPI document, the stream lifecycle with the JSON and statuses a client relies on, reader groups with
their lag, key-value tables, the cluster; and schemathesis fuzzing the API against its own document."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.error
import urllib.request
import uuid

import grpc
import pytest

from controller_api import controller_pb2 as pb
from controller_api import controller_pb2_grpc as pb_grpc
from controller.rest.api import RestApi
from controller.rest.openapi import OPENAPI
from tests.support.processes import free_port, listening, wait_until_ready
from tests.support.sdk import sdk
from tests.support.standalone import StandaloneProcess

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def rest(tmp_path_factory):
    """(REST base URL, controller URI) of a standalone serving the REST API."""
    port = free_port()
    standalone = StandaloneProcess(tmp_path_factory.mktemp("rest") / "data",
                                   extra_args=["--rest-port", str(port)]).start()
    try:  # the REST listener comes up after the controller's gRPC port (what start() waits for)
        wait_until_ready(standalone.process, listening(port), f"REST API on port {port}", 30.0)
        yield f"http://127.0.0.1:{port}", standalone.controller_uri
    finally:
        standalone.remove_data()


def call(base: str, method: str, path: str, body=None, raw: bytes | None = None) -> tuple[int, object]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as error:
        text = error.read()
        return error.code, json.loads(text) if text else None


def test_every_route_is_documented_and_every_documented_path_routed():
    app = RestApi(None, None, None).application()
    routed = {(route.method.lower(), route.resource.canonical) for route in app.router.routes()
              if route.method != "HEAD" and route.resource is not None}
    documented = {(method, path) for path, item in OPENAPI["paths"].items() for method in item
                  if method != "parameters"}
    assert routed - {("get", "/openapi.json")} == documented


def test_a_stream_from_creation_to_deletion(rest):
    base, _ = rest
    assert call(base, "POST", "/v1/scopes", {"scopeName": "life"}) == (201, {"scopeName": "life"})
    assert call(base, "POST", "/v1/scopes", {"scopeName": "life"})[0] == 409
    assert call(base, "GET", "/v1/scopes/life") == (200, {"scopeName": "life"})
    assert {"scopeName": "life"} in call(base, "GET", "/v1/scopes")[1]["scopes"]
    status, stream = call(base, "POST", "/v1/scopes/life/streams", {
        "streamName": "s", "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 2},
        "retentionPolicy": {"type": "SIZE", "value": 1 << 30}, "tags": ["a", "b"]})
    assert status == 201 and stream["state"] == "ACTIVE" and stream["tags"] == ["a", "b"]
    assert [segment["keyStart"] for segment in stream["segments"]] == [0.0, 0.5]
    assert stream["retentionPolicy"]["type"] == "SIZE" and stream["retentionPolicy"]["value"] == 1 << 30
    assert call(base, "GET", "/v1/scopes/life/streams?tag=a")[1] == {
        "streams": [{"scopeName": "life", "streamName": "s"}]}

    status, updated = call(base, "PUT", "/v1/scopes/life/streams/s", {
        "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 2}, "retentionPolicy": None, "tags": ["c"]})
    assert status == 200 and updated["tags"] == ["c"] and updated["retentionPolicy"] is None

    status, scaled = call(base, "POST", "/v1/scopes/life/streams/s/scale",
                          {"sealedSegments": [0], "newRanges": [[0.0, 0.25], [0.25, 0.5]]})
    assert status == 200 and scaled["currentEpoch"] == 1 and len(scaled["segments"]) == 3
    history = call(base, "GET", "/v1/scopes/life/streams/s/epochs")[1]
    assert [len(epoch["segments"]) for epoch in history["epochs"]] == [2, 3]
    segments = call(base, "GET", "/v1/scopes/life/streams/s/segments")[1]["segments"]
    assert all(segment["tailOffset"] == segment["bytesKept"] == 0 and segment["sealed"] is False
               for segment in segments)
    assert call(base, "POST", "/v1/scopes/life/streams/s/scale",
                {"sealedSegments": [0], "newRanges": [[0.0, 0.5]]})[0] == 409  # 0 is sealed already

    assert call(base, "DELETE", "/v1/scopes/life/streams/s")[1]["code"] == "StreamNotSealed"
    assert call(base, "DELETE", "/v1/scopes/life")[0] == 412  # not empty
    assert call(base, "PUT", "/v1/scopes/life/streams/s/state", {"streamState": "SEALED"}) == (
        200, {"streamState": "SEALED"})
    assert call(base, "GET", "/v1/scopes/life/streams/s")[1]["state"] == "SEALED"
    assert call(base, "DELETE", "/v1/scopes/life/streams/s") == (204, None)
    assert call(base, "GET", "/v1/scopes/life/streams/s")[0] == 404
    assert call(base, "DELETE", "/v1/scopes/life") == (204, None)
    assert call(base, "GET", "/v1/scopes/life")[0] == 404


def test_bad_input_gets_a_json_error_with_its_status(rest):
    base, _ = rest
    assert call(base, "POST", "/v1/scopes", raw=b"{not json")[1]["code"] == "InvalidJson"
    assert call(base, "POST", "/v1/scopes", [1, 2])[0] == 400
    assert call(base, "POST", "/v1/scopes", {"scopeName": "bad name!"})[1]["code"] == "InvalidName"
    assert call(base, "GET", "/v1/scopes/no-such-scope/streams/x")[1]["code"] == "StreamNotFound"
    assert call(base, "POST", "/v1/scopes/no-such-scope/streams", {"streamName": "s"})[0] == 404
    call(base, "POST", "/v1/scopes", {"scopeName": "bad"})
    for body, field in (({"streamName": "s", "scalingPolicy": {"type": "SOMETIMES"}}, "scaling type"),
                        ({"streamName": "s", "scalingPolicy": {"minSegments": 0}}, "minSegments"),
                        ({"streamName": "s", "retentionPolicy": {"type": "TIME", "value": -1}}, "retention"),
                        ({"streamName": "s", "tags": "a"}, "tags")):
        status, error = call(base, "POST", "/v1/scopes/bad/streams", body)
        assert status == 400 and field in error["message"], (body, error)
    assert call(base, "PUT", "/v1/scopes/bad/streams/x/state", {"streamState": "OPEN"})[0] == 400
    assert call(base, "GET", "/v1/nowhere")[0] == 404 and call(base, "GET", "/v1/nowhere")[1]["code"]
    assert call(base, "GET", "/v1/scopes/bad/streams/x/epochs?limit=0")[0] == 400


def test_reader_groups_with_their_lag_tables_and_the_cluster(rest):
    base, controller_uri = rest
    call(base, "POST", "/v1/scopes", {"scopeName": "groups"})
    call(base, "POST", "/v1/scopes/groups/streams",
         {"streamName": "s", "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 1}})

    async def write() -> None:
        async with sdk.connect(controller_uri) as client:
            async with client.create_writer("groups", "s") as writer:
                await asyncio.gather(*[await writer.write(b"x" * 100, "key") for _ in range(10)])

    asyncio.run(write())
    with grpc.insecure_channel(controller_uri[len("tcp://"):]) as channel:  # a subscriber group (Java's AUTOMATIC)
        reply = pb_grpc.ControllerServiceStub(channel).createReaderGroup(pb.ReaderGroupConfiguration(
            scope="groups", readerGroupName="subscriber", retentionType=2, readerGroupId=str(uuid.uuid4()),
            startingStreamCuts=[pb.StreamCut(streamInfo=pb.StreamInfo(scope="groups", stream="s"))]), timeout=30)
        assert reply.status == pb.CreateReaderGroupResponse.SUCCESS
    assert call(base, "GET", "/v1/scopes/groups/readergroups")[1] == {
        "readerGroups": [{"readerGroupName": "subscriber"}]}
    status, group = call(base, "GET", "/v1/scopes/groups/readergroups/subscriber")
    assert status == 200 and group["streams"] == ["groups/s"]
    assert group["lagBytes"]["groups/s"] >= 10 * 100  # nothing read yet: every byte is ahead of it
    assert call(base, "GET", "/v1/scopes/groups/readergroups/none")[0] == 404

    status, table = call(base, "POST", "/v1/scopes/groups/kvtables",
                         {"kvtName": "t", "partitionCount": 3, "primaryKeyLength": 8})
    assert status == 201 and len(table["partitions"]) == 3
    assert call(base, "GET", "/v1/scopes/groups/kvtables")[1] == {"kvtables": [{"scopeName": "groups", "kvtName": "t"}]}
    assert call(base, "POST", "/v1/scopes/groups/kvtables",
                {"kvtName": "t", "partitionCount": 3, "primaryKeyLength": 8})[0] == 409
    assert call(base, "DELETE", "/v1/scopes/groups/kvtables/t") == (204, None)
    assert call(base, "GET", "/v1/scopes/groups/kvtables/t")[0] == 404

    cluster = call(base, "GET", "/v1/cluster")[1]
    assert cluster["containerCount"] == 4 and cluster["segmentStores"][0]["containers"] == [0, 1, 2, 3]


def test_a_truncated_segment_gives_its_head_its_tail_and_the_bytes_kept(rest):
    """After truncation the head is startOffset; tailOffset is where the next byte goes, and bytesKept the
    bytes between (issue 24: the tail was called ``length``, as if it were the bytes kept)."""
    base, controller_uri = rest
    call(base, "POST", "/v1/scopes", {"scopeName": "offsets"})
    call(base, "POST", "/v1/scopes/offsets/streams",
         {"streamName": "s", "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 1}})

    async def write() -> None:  # ten events of 92 bytes, 100 with their 8-byte headers
        async with sdk.connect(controller_uri) as client:
            async with client.create_writer("offsets", "s") as writer:
                await asyncio.gather(*[await writer.write(b"x" * 92, "key") for _ in range(10)])

    asyncio.run(write())
    [segment] = call(base, "GET", "/v1/scopes/offsets/streams/s/segments")[1]["segments"]
    assert (segment["startOffset"], segment["tailOffset"], segment["bytesKept"]) == (0, 1000, 1000)
    status, _ = call(base, "POST", "/v1/scopes/offsets/streams/s/truncate", {"streamCut": {"0": 400}})
    assert status == 200
    [segment] = call(base, "GET", "/v1/scopes/offsets/streams/s/segments")[1]["segments"]
    assert (segment["startOffset"], segment["tailOffset"], segment["bytesKept"]) == (400, 1000, 600)
    assert "length" not in segment


@pytest.mark.slow
def test_the_api_conforms_to_its_openapi_document_under_fuzzing(rest, tmp_path):
    """schemathesis generates requests from the document: no 5xx, every status and body as documented."""
    base, _ = rest
    result = subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "run", f"{base}/openapi.json", "--url", base,
         "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,"
                     "response_schema_conformance",
         "--max-examples", "25", "--seed", "1", "--no-color",
         # Creating a stream of 10,000 segments (the largest allowed) and deleting it takes seconds, more than
         # the default 10 s on a loaded machine (the suite runs in parallel): a slow answer is not a wrong one.
         "--request-timeout", "60"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
