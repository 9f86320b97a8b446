"""The real pravega client (0.3.8) administers scopes and streams on `tributary standalone`:
create with fixed, auto-scaling and retention policies and tags, list, read tags, update, the
error answers the client turns into exceptions, then seal, delete and delete the scope. What the
client sent is checked on the controller side over gRPC. Also through Tributary's drop-in for the client."""

from __future__ import annotations

import os

import grpc
import pytest

from controller_api import controller_pb2 as pb
from controller_api import controller_pb2_grpc as pb_grpc
from tests.support.pravega_driver import run_scenario
from tests.support.standalone import BINDING_TARGETS, COMPAT_CLIENT, interop_server

pytestmark = [pytest.mark.interop, pytest.mark.process]
SCOPE = "admin-scope"


@pytest.fixture(params=BINDING_TARGETS)
def standalone(request, tmp_path):
    yield from interop_server(request, tmp_path)


def configuration(port: int, stream: str) -> pb.StreamConfig:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return pb_grpc.ControllerServiceStub(channel).getStreamConfiguration(
            pb.StreamInfo(scope=SCOPE, stream=stream), timeout=10)


def current_segment_count(port: int, stream: str) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return len(pb_grpc.ControllerServiceStub(channel).getCurrentSegments(
            pb.StreamInfo(scope=SCOPE, stream=stream), timeout=10).segmentRanges)


def rejected(outcome: str, operation: str, message: str, reason: str) -> bool:
    """Whether the client reported the controller's refusal of ``operation`` at once: not a timeout, an internal
    error, or a rejection retried for a while. The binding prints the Rust client's error with ``message`` and
    its number of tries; the drop-in (tributary.compat.pravega_client) names the SDK's error, ``reason``, which
    the SDK raises only for an answer it does not retry."""
    if os.environ.get(COMPAT_CLIENT) == "compat":
        return outcome.startswith(f"raised ValueError: {operation} failed: {reason}: ")
    return (outcome.startswith("raised ValueError: ") and f'operation: "{operation}"' in outcome
            and f'error_msg: "{message}"' in outcome and "can_retry: false" in outcome and "tries: 1 " in outcome)


def test_scopes_streams_policies_and_tags(standalone, tmp_path):
    """Creates, lists, tags and updates streams; the controller recorded exactly the policies sent."""
    result = run_scenario("admin", standalone.controller_uri, {"scope": SCOPE}, tmp_path / "admin.out")
    assert result["create_scope"] == [True, False]
    assert rejected(result["invalid_scope"], "CreateScope", "Invalid scope", "InvalidArgument")
    assert (result["fixed1"], result["fixed4"], result["fixed4_again"]) == (True, True, False)
    assert rejected(result["invalid_stream"], "CreateStream", "Invalid Stream/Scope Not Found", "InvalidArgument")
    assert rejected(result["missing_scope"], "CreateStream", "Invalid Stream/Scope Not Found", "ScopeNotFound")
    assert result["by_data_rate"] and result["by_event_rate"] and result["by_time"]
    assert SCOPE in result["scopes"]
    names = ["fixed1", "fixed4", "by-data-rate", "by-event-rate", "by-time"]
    # As from Java's controller, the listing includes each stream's watermark stream _MARK<stream>.
    assert result["streams"] == sorted(names + ["_MARK" + name for name in names])
    assert result["tags"] == {"fixed1": [], "by-data-rate": ["rate", "shared"], "by-event-rate": ["shared"]}
    assert result["update"] is True and result["tags_after_update"] == ["updated"]
    assert rejected(result["update_missing"], "updateStream", "Stream/Scope Not Found", "StreamNotFound")
    assert rejected(result["delete_unsealed"], "DeleteStream", "Stream Not Sealed", "StreamNotSealed")
    assert rejected(result["delete_nonempty_scope"], "DeleteScope", "Scope not empty", "ScopeNotEmpty")

    port = standalone.controller_port
    data_rate = configuration(port, "by-data-rate")
    assert (data_rate.scalingPolicy.scaleType, data_rate.scalingPolicy.targetRate,
            data_rate.scalingPolicy.scaleFactor, data_rate.scalingPolicy.minNumSegments) == (1, 1024, 2, 3)
    assert not data_rate.HasField("retentionPolicy")
    event_rate = configuration(port, "by-event-rate")
    assert (event_rate.scalingPolicy.scaleType, event_rate.scalingPolicy.targetRate) == (2, 100)
    assert (event_rate.retentionPolicy.retentionType, event_rate.retentionPolicy.retentionParam) == (2, 1 << 30)
    by_time = configuration(port, "by-time")
    assert (by_time.retentionPolicy.retentionType, by_time.retentionPolicy.retentionParam) == (1, 86_400_000)
    assert current_segment_count(port, "by-data-rate") == 3
    assert current_segment_count(port, "fixed4") == 2  # the update rescaled 4 -> 2

    cleanup = run_scenario("cleanup", standalone.controller_uri, {"scope": SCOPE}, tmp_path / "cleanup.out")
    assert all(cleanup["seal"].values()) and all(cleanup["delete"].values())
    assert cleanup["delete_again"] is False
    assert cleanup["streams_left"] == []
    assert cleanup["delete_scope"] == [True, False]
    assert SCOPE not in cleanup["scopes"]
