"""gRPC's own "Handshake failed" lines (issue 24): plaintext gRPC clients knocking on a TLS standalone's
controller port make gRPC's core write a line per failed handshake straight to fd 2. They come out as
records of the structured logger ``tributary.native`` (JSON like every other), at most one per 10 s with the
count of those held back; stderr holds nothing but JSON and the command's own two lines."""

from __future__ import annotations

import json

import grpc
import pytest

from controller_api import controller_pb2 as pb
from controller_api import controller_pb2_grpc as pb_grpc
from tests.support.certs import make_certificates
from tests.support.standalone import StandaloneProcess
from tests.support.waiting import eventually_blocking

pytestmark = pytest.mark.process

ATTEMPTS = 5


def test_handshake_failures_are_structured_and_rate_limited(tmp_path):
    certificates = make_certificates(tmp_path / "certs")
    log_path = tmp_path / "standalone.log"
    standalone = StandaloneProcess(tmp_path / "data", log_path=log_path, extra_args=[
        "--tls-cert", str(certificates.certificate), "--tls-key", str(certificates.key), "--log-level", "info"])
    standalone.start(timeout=60)
    try:
        for _ in range(ATTEMPTS):  # each a new channel (own subchannels), so a new connection and handshake
            with grpc.insecure_channel(f"127.0.0.1:{standalone.controller_port}",
                                       options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
                try:
                    pb_grpc.ControllerServiceStub(channel).checkScopeExists(pb.ScopeInfo(scope="s"), timeout=2)
                    raise AssertionError("a plaintext call to the TLS port succeeded")
                except grpc.RpcError as error:
                    assert error.code() == grpc.StatusCode.UNAVAILABLE
        # the banner: SIGTERM is handled from then on
        eventually_blocking(lambda: "standalone:" in log_path.read_text(), "the banner", timeout=30)
        assert standalone.terminate() == 0  # held-back lines are flushed at exit
    finally:
        standalone.remove_data()

    lines = log_path.read_text().splitlines()
    own = [line for line in lines if not line.startswith("{")]
    assert len(own) == 2 and own[0].startswith("tributary ") and own[1] == "stopped", own
    records = [json.loads(line) for line in lines if line.startswith("{")]
    handshakes = [record for record in records if record["logger"] == "tributary.native"
                  and "Handshake failed" in record["msg"]]
    assert handshakes and all(record["level"] == "info" for record in handshakes)
    assert "WRONG_VERSION_NUMBER" in handshakes[0]["msg"]
    assert handshakes[0]["source"].startswith("ssl_transport_security.cc:")
    # The attempts took well under 10 s: one record when the first came, one at exit with the count of the
    # rest (gRPC may retry a connection on its own, so there can be more failed handshakes than attempts).
    assert len(handshakes) == 2, handshakes
    assert sum(1 + record.get("suppressed", 0) for record in handshakes) >= ATTEMPTS
