"""Pure helpers of clients/controller_client.py (controller URI parsing) and the proto conversions of
transaction ids and stream configurations it uses (controller_api/protobuf.py)."""

from __future__ import annotations

import string
import uuid

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from clients.controller_client import parse_controller_uri
from clients.controller_endpoints import parse_controller_uris
from clients.errors import InvalidArgument
from clients.model import RetentionPolicy, RetentionType, ScaleType, ScalingPolicy, StreamConfiguration
from controller_api import controller_pb2 as pb
from controller_api.protobuf import configuration_from, configuration_to, transaction_id_from, transaction_id_to

INT32 = st.integers(-2**31, 2**31 - 1)
INT64_NON_NEGATIVE = st.integers(0, 2**63 - 1)


# ---------------------------------------------------------------------- parse_controller_uri


@pytest.mark.parametrize("uri, expected", [
    ("tcp://localhost:9090", ("localhost", 9090)),
    ("localhost:9090", ("localhost", 9090)),
    ("pravega://10.0.0.1:9090", ("10.0.0.1", 9090)),
    ("tcp://a:1,tcp://b:2", ("a", 1)),
    ("a:1,b:2,c:3", ("a", 1)),
    ("  tcp://host.example:65535/ ", ("host.example", 65535)),
    ("tcp://[::1]:9090", ("::1", 9090)),
    ("tls://localhost:9090", ("localhost", 9090)),
    ("ssl://h:1", ("h", 1)),
    ("pravegas://h:2", ("h", 2)),
])
def test_parse_controller_uri_accepts(uri, expected):
    """tcp://h:p, h:p and pravega://h:p give (host, port): the first of a comma list."""
    assert parse_controller_uri(uri) == expected


@pytest.mark.parametrize("uri", [
    "", "   ", "localhost", "localhost:", ":9090", "tcp://", "tcp://:9090", "tcp://localhost",
    "http://localhost:9090", "https://h:1", "localhost:0", "localhost:65536",
    "localhost:-1", "localhost:abc", "localhost:90 90", "tcp://h:9090:", ",tcp://h:9090",
    "tcp://h:9090,", "tcp://h:9090,junk", "tcp://a:1,,b:2", "tcp://a:1,http://b:2", "tls://a:1,tcp://b:2",
])
def test_parse_controller_uri_rejects(uri):
    """Other schemes, a missing host or port, ports outside 1..65535, an empty or bad entry anywhere in a list,
    and a list mixing TLS and plaintext raise InvalidArgument."""
    with pytest.raises(InvalidArgument):
        parse_controller_uri(uri)


hosts = st.text(alphabet=string.ascii_letters + string.digits + ".-_", min_size=1, max_size=30)
ports = st.integers(1, 65535)


@settings(max_examples=150, deadline=None)
@given(hosts, ports, st.sampled_from(["tcp://", "pravega://", "tls://", ""]), st.sampled_from(["", ",x:1", ",[::1]:2"]))
def test_parse_controller_uri_round_trips_host_and_port(host, port, scheme, tail):
    """Any host:port in any accepted form, with any list tail, parses to (host, port)."""
    assert parse_controller_uri(f"{scheme}{host}:{port}{tail}") == (host, port)


@pytest.mark.parametrize("uri, tls", [("tls://h:1", True), ("SSL://h:1", True), ("pravegas://h:1,x:2", True),
                                      ("tcp://h:1", False), ("h:1", False), ("pravega://h:1,x:2", False)])
def test_tls_follows_the_scheme_which_a_list_shares(uri, tls):
    assert parse_controller_uris(uri)[0] is tls


def _parses_or_rejects(uri: str) -> None:
    try:
        host, port = parse_controller_uri(uri)
    except InvalidArgument:
        return
    assert isinstance(host, str) and isinstance(port, int) and 0 < port < 65536


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=string.printable, max_size=40))
def test_any_ascii_uri_parses_or_is_invalid_argument(uri):
    """Any printable-ASCII string yields a (host, port) with a valid port or raises InvalidArgument."""
    _parses_or_rejects(uri)


@settings(max_examples=300, deadline=None)
@example("localhost:²")
@given(st.text(max_size=40))
def test_any_unicode_uri_parses_or_is_invalid_argument(uri):
    """Any string (full Unicode) yields a (host, port) with a valid port or raises InvalidArgument."""
    _parses_or_rejects(uri)


# ---------------------------------------------------------------------- transaction ids


@pytest.mark.parametrize("value, high, low", [
    (0, 0, 0),
    (1, 0, 1),
    (2**63, 0, -2**63),
    (2**64 - 1, 0, -1),
    (2**64, 1, 0),
    (2**127, -2**63, 0),
    (2**128 - 1, -1, -1),
    (0x0123456789ABCDEF_FEDCBA9876543210, 0x0123456789ABCDEF, 0xFEDCBA9876543210 - 2**64),
])
def test_txn_id_halves_are_signed_longs(value, high, low):
    """TxnId carries the UUID's most/least significant 64 bits as Java's signed longs."""
    message = transaction_id_to(uuid.UUID(int=value))
    assert (message.highBits, message.lowBits) == (high, low)
    assert transaction_id_from(message) == uuid.UUID(int=value)


@settings(max_examples=200, deadline=None)
@given(st.uuids() | st.integers(0, 2**128 - 1).map(lambda value: uuid.UUID(int=value)))
def test_txn_id_round_trips(transaction_id):
    """Any 128-bit UUID survives transaction_id_to -> serialized proto -> transaction_id_from."""
    message = transaction_id_to(transaction_id)
    assert -2**63 <= message.highBits < 2**63 and -2**63 <= message.lowBits < 2**63
    parsed = pb.TxnId.FromString(message.SerializeToString())
    assert transaction_id_from(parsed) == transaction_id


# ---------------------------------------------------------------------- stream configurations

scalings = st.one_of(
    st.builds(ScalingPolicy.fixed, st.integers(1, 2**31 - 1)),
    st.builds(ScalingPolicy.by_event_rate, st.integers(1, 2**31 - 1), st.integers(1, 2**31 - 1),
              st.integers(1, 2**31 - 1)),
    st.builds(ScalingPolicy.by_data_rate, st.integers(1, 2**31 - 1), st.integers(1, 2**31 - 1),
              st.integers(1, 2**31 - 1)),
    st.builds(ScalingPolicy, st.just(ScaleType.FIXED_NUM_SEGMENTS), INT32, INT32, st.integers(1, 2**31 - 1)),
)


@st.composite
def retentions(draw):
    minimum = draw(st.integers(0, 2**63 - 2))
    maximum = draw(st.just(0) | st.integers(minimum, 2**63 - 2))  # 2**63 - 1 is how "no maximum" (0) travels
    return RetentionPolicy(draw(st.sampled_from(list(RetentionType))), minimum, maximum)


configurations = st.builds(StreamConfiguration, scalings, st.none() | retentions(),
                           st.lists(st.text(max_size=20), max_size=5).map(tuple), INT64_NON_NEGATIVE,
                           INT64_NON_NEGATIVE)


def test_config_to_fields():
    """configuration_to writes every field of the proto from the configuration."""
    config = StreamConfiguration(ScalingPolicy.by_event_rate(100, 2, 3), RetentionPolicy.by_size(10, 20),
                                 ("a", "b"), 1024, 500)
    message = configuration_to("sc", "st", config)
    assert (message.streamInfo.scope, message.streamInfo.stream) == ("sc", "st")
    policy = message.scalingPolicy
    assert (policy.scaleType, policy.targetRate, policy.scaleFactor, policy.minNumSegments) == (
        pb.ScalingPolicy.BY_RATE_IN_EVENTS_PER_SEC, 100, 2, 3)
    retention = message.retentionPolicy
    assert (retention.retentionType, retention.retentionParam, retention.retentionMax) == (
        pb.RetentionPolicy.SIZE, 10, 20)
    assert list(message.tags.tag) == ["a", "b"]
    assert (message.rolloverSizeBytes, message.timestampAggregationTimeout) == (1024, 500)
    assert not configuration_to("sc", "st", StreamConfiguration()).HasField("retentionPolicy")


def test_config_from_defaults():
    """An empty StreamConfig reads as one fixed segment, no retention, no tags."""
    assert configuration_from(pb.StreamConfig()) == StreamConfiguration()


@settings(max_examples=200, deadline=None)
@given(configurations, st.sampled_from(["sc", "my-scope"]), st.sampled_from(["st", "s.1"]))
def test_config_round_trips(config, scope, stream):
    """Any valid StreamConfiguration survives configuration_to -> serialized proto -> configuration_from."""
    message = configuration_to(scope, stream, config)
    parsed = pb.StreamConfig.FromString(message.SerializeToString())
    assert (parsed.streamInfo.scope, parsed.streamInfo.stream) == (scope, stream)
    assert configuration_from(parsed) == config
