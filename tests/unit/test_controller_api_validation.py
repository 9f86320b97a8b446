"""The controller's request validation (``controller.api_validation``) and bad-request handling
(``controller.bad_requests``): every RPC has a check; names, segment ids, key ranges, counts, cuts,
transaction ids, leases and policies that can never succeed are refused with the RPC's own status
reply or INVALID_ARGUMENT (never INTERNAL); what real clients send passes; undecodable bytes and
refused requests never reach the servicer and are logged as one summary line per interval."""

from __future__ import annotations

import logging

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller_api import controller_pb2 as pb
from controller_api import controller_pb2_grpc as pb_grpc
from controller.api_validation import VALIDATORS, validate
from controller.bad_requests import SERVICE, BadRequestLog, Undecodable, add_guarded_servicer, tolerant
from controller.grpc_server import start_grpc_server
from tests.support.waiting import eventually
from wire import naming

INVALID = grpc.StatusCode.INVALID_ARGUMENT
I64_MIN = -2**63


def info(scope: str = "sc", stream: str = "st") -> pb.StreamInfo:
    return pb.StreamInfo(scope=scope, stream=stream)


def config(scope: str = "sc", stream: str = "st", **scaling) -> pb.StreamConfig:
    policy = {"minNumSegments": 1, **scaling}
    return pb.StreamConfig(streamInfo=info(scope, stream), scalingPolicy=pb.ScalingPolicy(**policy))


def retention(kind: int, param: int, maximum: int) -> pb.StreamConfig:
    message = config()
    message.retentionPolicy.CopyFrom(pb.RetentionPolicy(retentionType=kind, retentionParam=param,
                                                        retentionMax=maximum))
    return message


def scale(sealed=(0,), ranges=((0.0, 0.5), (0.5, 1.0)), **names) -> pb.ScaleRequest:
    return pb.ScaleRequest(streamInfo=info(**names), sealedSegments=list(sealed),
                           newKeyRanges=[pb.ScaleRequest.KeyRangeEntry(start=low, end=high) for low, high in ranges])


def txn(high: int = 1 << 32, low: int = 5, **fields) -> pb.TxnRequest:
    return pb.TxnRequest(streamInfo=fields.pop("streamInfo", info()), txnId=pb.TxnId(highBits=high, lowBits=low),
                         **fields)


def group(name: str = "rg", scope: str = "sc", **fields) -> pb.ReaderGroupConfiguration:
    values = {"groupRefreshTimeMillis": 3000, "automaticCheckpointIntervalMillis": 30000,
              "maxOutstandingCheckpointRequest": 3, **fields}
    return pb.ReaderGroupConfiguration(scope=scope, readerGroupName=name, **values)


def table(name: str = "kvt", scope: str = "sc", **fields) -> pb.KeyValueTableConfig:
    values = {"partitionCount": 2, "primaryKeyLength": 8, **fields}
    return pb.KeyValueTableConfig(scope=scope, kvtName=name, **values)


def subscriber_cut(subscriber: str = "sc/rg", cut=None, **fields) -> pb.SubscriberStreamCut:
    return pb.SubscriberStreamCut(subscriber=subscriber, streamCut=pb.StreamCut(
        streamInfo=fields.pop("streamInfo", info()), cut=cut or {0: 10}), **fields)


S, D, U = pb.CreateScopeStatus, pb.DeleteScopeStatus, pb.UpdateStreamStatus

# (rpc, request, expected): a reply message is the RPC's own answer, a status code an abort with it
REFUSED = [
    # scopes: creation says INVALID_SCOPE_NAME, lookups say "not found" (as Java does for a bad name)
    ("createScope", pb.ScopeInfo(scope=""), S(status=S.INVALID_SCOPE_NAME)),
    ("createScope", pb.ScopeInfo(scope="bad scope"), S(status=S.INVALID_SCOPE_NAME)),
    ("createScope", pb.ScopeInfo(scope="x" * 256), S(status=S.INVALID_SCOPE_NAME)),
    ("createScope", pb.ScopeInfo(scope="a/b"), S(status=S.INVALID_SCOPE_NAME)),
    ("deleteScope", pb.ScopeInfo(scope=""), D(status=D.SCOPE_NOT_FOUND)),
    ("deleteScopeRecursive", pb.ScopeInfo(scope="a/b"), D(status=D.SCOPE_NOT_FOUND)),
    ("checkScopeExists", pb.ScopeInfo(scope=""), pb.ExistsResponse(exists=False)),
    ("checkScopeExists", pb.ScopeInfo(scope="x" * 9000), pb.ExistsResponse(exists=False)),
    ("checkStreamExists", info(stream=""), pb.ExistsResponse(exists=False)),
    ("listStreamsInScope", pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope="")),
     pb.StreamsInScopeResponse(status=pb.StreamsInScopeResponse.SCOPE_NOT_FOUND,
                               continuationToken=pb.ContinuationToken())),
    ("listStreamsInScopeForTag", pb.StreamsInScopeWithTagRequest(scope=pb.ScopeInfo(scope="é"), tag="t"),
     pb.StreamsInScopeResponse(status=pb.StreamsInScopeResponse.SCOPE_NOT_FOUND,
                               continuationToken=pb.ContinuationToken())),
    ("listKeyValueTablesInScope", pb.KVTablesInScopeRequest(scope=pb.ScopeInfo(scope="")),
     pb.KVTablesInScopeResponse(status=pb.KVTablesInScopeResponse.SCOPE_NOT_FOUND,
                                continuationToken=pb.ContinuationToken())),
    # streams and their policies
    ("createStream", config(stream="bad/name"), pb.CreateStreamStatus(status=pb.CreateStreamStatus.INVALID_STREAM_NAME)),
    ("createStream", config(stream=""), pb.CreateStreamStatus(status=pb.CreateStreamStatus.INVALID_STREAM_NAME)),
    ("createStream", config(scope=""), pb.CreateStreamStatus(status=pb.CreateStreamStatus.SCOPE_NOT_FOUND)),
    ("createStream", config(minNumSegments=0), INVALID),
    ("createStream", config(minNumSegments=-5), INVALID),
    ("createStream", config(scaleType=7), INVALID),
    ("createStream", config(scaleType=1, targetRate=-1, scaleFactor=2), INVALID),
    ("createStream", config(scaleType=2, targetRate=10, scaleFactor=-2), INVALID),
    ("createStream", retention(9, 0, 0), INVALID),
    ("createStream", retention(pb.RetentionPolicy.TIME, -1, 10), INVALID),
    ("createStream", retention(pb.RetentionPolicy.SIZE, 100, 10), INVALID),
    ("createStream", pb.StreamConfig(streamInfo=info(), scalingPolicy=pb.ScalingPolicy(minNumSegments=1),
                                     rolloverSizeBytes=-1), INVALID),
    ("createStream", pb.StreamConfig(streamInfo=info(), scalingPolicy=pb.ScalingPolicy(minNumSegments=1),
                                     timestampAggregationTimeout=-1), INVALID),
    ("updateStream", config(scope=""), U(status=U.STREAM_NOT_FOUND)),
    ("updateStream", config(minNumSegments=0), INVALID),
    ("truncateStream", pb.StreamCut(streamInfo=info(stream="a b"), cut={0: 1}), U(status=U.STREAM_NOT_FOUND)),
    ("truncateStream", pb.StreamCut(streamInfo=info(), cut={-1: 0}), INVALID),
    ("sealStream", info(scope=""), U(status=U.STREAM_NOT_FOUND)),
    ("deleteStream", info(stream=""), pb.DeleteStreamStatus(status=pb.DeleteStreamStatus.STREAM_NOT_FOUND)),
    ("getStreamConfiguration", info(stream=""), INVALID),
    # segment queries: names, segment ids (epoch << 32 | number, both non-negative), epochs, cuts
    ("getCurrentSegments", info(scope=""), INVALID),
    ("getEpochSegments", pb.GetEpochSegmentsRequest(streamInfo=info(), epoch=-1), INVALID),
    ("getEpochSegments", pb.GetEpochSegmentsRequest(streamInfo=info(scope="")), INVALID),
    ("getSegments", pb.GetSegmentsRequest(streamInfo=info(stream="")), INVALID),
    ("getSegmentsImmediatelyFollowing", pb.SegmentId(streamInfo=info(), segmentId=-1), INVALID),
    ("getSegmentsImmediatelyFollowing", pb.SegmentId(streamInfo=info(), segmentId=1 << 32 | 1 << 31), INVALID),
    ("getSegmentsImmediatlyFollowing", pb.SegmentId(streamInfo=info(stream=""), segmentId=0), INVALID),
    ("getSegmentsBetween", pb.StreamCutRange(streamInfo=info(), **{"from": {-5: 0}}), INVALID),
    ("getSegmentsBetween", pb.StreamCutRange(streamInfo=info(), to={0: 0, 2**31: 0}), INVALID),
    ("isSegmentValid", pb.SegmentId(streamInfo=info(), segmentId=-2**63), INVALID),
    ("isStreamCutValid", pb.StreamCut(streamInfo=info(scope="_"), cut={0: 0}), INVALID),
    ("getURI", pb.SegmentId(streamInfo=info(scope=""), segmentId=0), INVALID),
    ("getURI", pb.SegmentId(streamInfo=info(stream="a/b"), segmentId=0), INVALID),
    ("getURI", pb.SegmentId(streamInfo=info(stream=""), segmentId=0), INVALID),
    ("getURI", pb.SegmentId(streamInfo=info(), segmentId=-1), INVALID),
    # scaling: Java's statuses for ids that are not active and for ranges that are not ranges
    ("scale", scale(scope=""), INVALID),
    ("scale", scale(sealed=(-1,)), pb.ScaleResponse(status=pb.ScaleResponse.PRECONDITION_FAILED)),
    ("scale", scale(ranges=((0.5, 0.5),)), pb.ScaleResponse(status=pb.ScaleResponse.FAILURE)),
    ("scale", scale(ranges=((0.6, 0.4),)), pb.ScaleResponse(status=pb.ScaleResponse.FAILURE)),
    ("scale", scale(ranges=((float("nan"), 1.0),)), pb.ScaleResponse(status=pb.ScaleResponse.FAILURE)),
    ("scale", scale(ranges=((-0.1, 1.0),)), pb.ScaleResponse(status=pb.ScaleResponse.FAILURE)),
    ("scale", scale(ranges=((0.0, float("inf")),)), pb.ScaleResponse(status=pb.ScaleResponse.FAILURE)),
    ("scale", scale(ranges=()), pb.ScaleResponse(status=pb.ScaleResponse.FAILURE)),
    ("scale", scale(sealed=()), pb.ScaleResponse(status=pb.ScaleResponse.FAILURE)),
    ("checkScale", pb.ScaleStatusRequest(streamInfo=info(), epoch=-1),
     pb.ScaleStatusResponse(status=pb.ScaleStatusResponse.INVALID_INPUT)),
    ("checkScale", pb.ScaleStatusRequest(streamInfo=info(stream="")),
     pb.ScaleStatusResponse(status=pb.ScaleStatusResponse.INVALID_INPUT)),
    # transactions
    ("createTransaction", pb.CreateTxnRequest(streamInfo=info(scope=""), lease=30000), INVALID),
    ("createTransaction", pb.CreateTxnRequest(streamInfo=info(), lease=0), INVALID),
    ("createTransaction", pb.CreateTxnRequest(streamInfo=info(), lease=-30000), INVALID),
    ("pingTransaction", pb.PingTxnRequest(streamInfo=info(stream=""), txnId=pb.TxnId(highBits=1), lease=30000),
     pb.PingTxnStatus(status=pb.PingTxnStatus.UNKNOWN)),
    ("pingTransaction", pb.PingTxnRequest(streamInfo=info(), lease=30000),
     pb.PingTxnStatus(status=pb.PingTxnStatus.UNKNOWN)),
    ("pingTransaction", pb.PingTxnRequest(streamInfo=info(), txnId=pb.TxnId(highBits=1), lease=-1), INVALID),
    ("commitTransaction", txn(streamInfo=info(scope="")), pb.TxnStatus(status=pb.TxnStatus.STREAM_NOT_FOUND)),
    ("commitTransaction", txn(high=-1), pb.TxnStatus(status=pb.TxnStatus.TRANSACTION_NOT_FOUND)),
    ("commitTransaction", pb.TxnRequest(streamInfo=info()), pb.TxnStatus(status=pb.TxnStatus.TRANSACTION_NOT_FOUND)),
    ("commitTransaction", txn(writerId="w" * 5000), INVALID),
    ("abortTransaction", txn(streamInfo=info(stream="a/b")), pb.TxnStatus(status=pb.TxnStatus.STREAM_NOT_FOUND)),
    ("abortTransaction", txn(high=-2**63), pb.TxnStatus(status=pb.TxnStatus.TRANSACTION_NOT_FOUND)),
    ("checkTransactionState", txn(streamInfo=info(scope="")), pb.TxnState(state=pb.TxnState.UNKNOWN)),
    ("checkTransactionState", pb.TxnRequest(streamInfo=info()), pb.TxnState(state=pb.TxnState.UNKNOWN)),
    ("listCompletedTransactions", pb.ListCompletedTxnRequest(streamInfo=info(stream="")), INVALID),
    # writers
    ("removeWriter", pb.RemoveWriterRequest(writer="", stream=info()),
     pb.RemoveWriterResponse(result=pb.RemoveWriterResponse.UNKNOWN_WRITER)),
    ("removeWriter", pb.RemoveWriterRequest(writer="w", stream=info(scope="")),
     pb.RemoveWriterResponse(result=pb.RemoveWriterResponse.UNKNOWN_WRITER)),
    ("noteTimestampFromWriter", pb.TimestampFromWriter(writer="", position=pb.StreamCut(streamInfo=info())), INVALID),
    ("noteTimestampFromWriter", pb.TimestampFromWriter(writer="w", position=pb.StreamCut(streamInfo=info(),
                                                                                         cut={-3: 0})),
     pb.TimestampResponse(result=pb.TimestampResponse.INVALID_POSITION)),
    # key-value tables
    ("createKeyValueTable", table(name="bad name"),
     pb.CreateKeyValueTableStatus(status=pb.CreateKeyValueTableStatus.INVALID_TABLE_NAME)),
    ("createKeyValueTable", table(name="_internal"),
     pb.CreateKeyValueTableStatus(status=pb.CreateKeyValueTableStatus.INVALID_TABLE_NAME)),
    ("createKeyValueTable", table(scope=""),
     pb.CreateKeyValueTableStatus(status=pb.CreateKeyValueTableStatus.SCOPE_NOT_FOUND)),
    ("createKeyValueTable", table(partitionCount=0), INVALID),
    ("createKeyValueTable", table(primaryKeyLength=0), INVALID),
    ("createKeyValueTable", table(secondaryKeyLength=-1), INVALID),
    ("createKeyValueTable", table(rolloverSizeBytes=-1), INVALID),
    ("getCurrentSegmentsKeyValueTable", pb.KeyValueTableInfo(scope="", kvtName="kvt"), INVALID),
    ("getCurrentSegmentsKeyValueTable", pb.KeyValueTableInfo(scope="sc", kvtName="x" * 9000), INVALID),
    ("getKeyValueTableConfiguration", pb.KeyValueTableInfo(scope="sc", kvtName=""),
     pb.KeyValueTableConfigResponse(status=pb.KeyValueTableConfigResponse.TABLE_NOT_FOUND)),
    ("deleteKeyValueTable", pb.KeyValueTableInfo(scope="", kvtName="kvt"),
     pb.DeleteKVTableStatus(status=pb.DeleteKVTableStatus.TABLE_NOT_FOUND)),
    # reader groups and subscribers
    ("createReaderGroup", group(name="bad name"),
     pb.CreateReaderGroupResponse(status=pb.CreateReaderGroupResponse.INVALID_RG_NAME)),
    ("createReaderGroup", group(scope=""),
     pb.CreateReaderGroupResponse(status=pb.CreateReaderGroupResponse.SCOPE_NOT_FOUND)),
    ("createReaderGroup", group(retentionType=5), INVALID),
    ("createReaderGroup", group(readerGroupId="not-a-uuid"), INVALID),
    ("createReaderGroup", group(generation=-1), INVALID),
    ("createReaderGroup", group(startingStreamCuts=[pb.StreamCut(streamInfo=info(stream=""))]), INVALID),
    ("createReaderGroup", group(endingStreamCuts=[pb.StreamCut(streamInfo=info(), cut={-1: 0})]), INVALID),
    ("updateReaderGroup", group(name=""), pb.UpdateReaderGroupResponse(status=pb.UpdateReaderGroupResponse.RG_NOT_FOUND)),
    ("updateReaderGroup", group(maxOutstandingCheckpointRequest=-1), INVALID),
    ("getReaderGroupConfig", pb.ReaderGroupInfo(scope="sc", readerGroup="a/b"),
     pb.ReaderGroupConfigResponse(status=pb.ReaderGroupConfigResponse.RG_NOT_FOUND,
                                  config=pb.ReaderGroupConfiguration(scope="sc", readerGroupName="a/b"))),
    ("deleteReaderGroup", pb.ReaderGroupInfo(scope="", readerGroup="rg"),
     pb.DeleteReaderGroupStatus(status=pb.DeleteReaderGroupStatus.RG_NOT_FOUND)),
    ("deleteReaderGroup", pb.ReaderGroupInfo(scope="sc", readerGroup="rg", readerGroupId="nope"), INVALID),
    ("listSubscribers", info(scope=""), pb.SubscribersResponse(status=pb.SubscribersResponse.STREAM_NOT_FOUND)),
    ("updateSubscriberStreamCut", subscriber_cut(streamInfo=info(stream="")),
     pb.UpdateSubscriberStatus(status=pb.UpdateSubscriberStatus.STREAM_NOT_FOUND)),
    ("updateSubscriberStreamCut", subscriber_cut(subscriber="no-slash"),
     pb.UpdateSubscriberStatus(status=pb.UpdateSubscriberStatus.SUBSCRIBER_NOT_FOUND)),
    ("updateSubscriberStreamCut", subscriber_cut(readerGroupId="nope"), INVALID),
    ("updateSubscriberStreamCut", subscriber_cut(cut={-1: 5}),
     pb.UpdateSubscriberStatus(status=pb.UpdateSubscriberStatus.STREAM_CUT_NOT_VALID)),
]

# what the real clients (Rust/Python pravega 0.3.8, Java) send, and internal names the code allows
ACCEPTED = [
    ("createScope", pb.ScopeInfo(scope="sc")),
    ("createScope", pb.ScopeInfo(scope="_system")),
    ("createScope", pb.ScopeInfo(scope="a.b-C9")),
    ("createScope", pb.ScopeInfo(scope="x" * 255)),
    ("createStream", config()),
    ("createStream", config(stream="_MARKst")),
    ("createStream", config(stream="_RGgroup")),
    ("createStream", config(scaleType=1, targetRate=1024, scaleFactor=2, minNumSegments=3)),
    ("createStream", retention(pb.RetentionPolicy.TIME, 86_400_000, 2**63 - 1)),
    ("createStream", retention(pb.RetentionPolicy.UNKNOWN, -1, -1)),  # no retention: values ignored
    ("updateStream", config(minNumSegments=2)),
    ("truncateStream", pb.StreamCut(streamInfo=info(), cut={0: 100, 1 << 32 | 2: 0})),
    ("getSegmentsBetween", pb.StreamCutRange(streamInfo=info())),  # both empty: the service's to refuse
    ("isStreamCutValid", pb.StreamCut(streamInfo=info(), cut={0: -1})),  # future segment
    ("getURI", pb.SegmentId(streamInfo=info(stream="rg_kvtable"), segmentId=0)),  # a Rust reader group's table
    ("getURI", pb.SegmentId(streamInfo=info(), segmentId=1 << 32 | 7)),
    ("getSegments", pb.GetSegmentsRequest(streamInfo=info(), timestamp=-5)),  # ignored, as in Java
    ("getEpochSegments", pb.GetEpochSegmentsRequest(streamInfo=info(), epoch=3)),
    ("scale", scale()),
    ("checkScale", pb.ScaleStatusRequest(streamInfo=info(), epoch=0)),
    ("createTransaction", pb.CreateTxnRequest(streamInfo=info(), lease=90_000)),
    ("pingTransaction", pb.PingTxnRequest(streamInfo=info(), txnId=pb.TxnId(highBits=1 << 32, lowBits=3),
                                          lease=90_000)),
    ("commitTransaction", txn(writerId=str(2**128 - 1), timestamp=I64_MIN)),  # Python: no event time
    ("commitTransaction", txn(high=0, low=0)),
    ("abortTransaction", txn()),
    ("checkTransactionState", txn()),
    ("listCompletedTransactions", pb.ListCompletedTxnRequest(streamInfo=info())),
    ("listScopes", pb.ScopesRequest(continuationToken=pb.ContinuationToken(token="zz"))),  # the store refuses it
    ("checkStreamExists", info(scope="_system", stream="_requeststream")),
    ("listStreamsInScope", pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope="sc"))),
    ("removeWriter", pb.RemoveWriterRequest(writer="8c7b3b56-0a55-4b5e-a0a8-6a1f5e0c7c51", stream=info())),
    ("noteTimestampFromWriter", pb.TimestampFromWriter(writer="w-1", timestamp=5,
                                                       position=pb.StreamCut(streamInfo=info(), cut={0: 10}))),
    ("createKeyValueTable", table()),
    ("getCurrentSegmentsKeyValueTable", pb.KeyValueTableInfo(scope="sc", kvtName="kvt")),
    ("createReaderGroup", group()),
    ("createReaderGroup", group(readerGroupId="00000000-0000-0000-0000-000000000000", retentionType=2,
                                automaticCheckpointIntervalMillis=-1,
                                startingStreamCuts=[pb.StreamCut(streamInfo=info(), cut={0: 0})],
                                endingStreamCuts=[pb.StreamCut(streamInfo=info())])),
    ("updateSubscriberStreamCut", subscriber_cut(readerGroupId="8c7b3b56-0a55-4b5e-a0a8-6a1f5e0c7c51")),
    ("getControllerServerList", pb.ServerRequest()),
    ("getDelegationToken", info()),
    ("getControllerToBucketMapping", pb.ControllerToBucketMappingRequest()),
]


def test_every_rpc_has_a_check():
    assert set(VALIDATORS) == {method.name for method in SERVICE.methods}


@pytest.mark.parametrize("rpc, request_message, expected", REFUSED,
                         ids=[f"{rpc}-{index}" for index, (rpc, _, _) in enumerate(REFUSED)])
def test_bad_requests_get_their_status_reply_or_invalid_argument(rpc, request_message, expected):
    rejection = validate(rpc, request_message)
    assert rejection is not None, f"{rpc} let {request_message} through"
    if isinstance(expected, grpc.StatusCode):
        assert rejection.reply is None and rejection.code == expected, rejection
    else:
        assert rejection.reply == expected, rejection
        assert type(rejection.reply).__name__ == SERVICE.methods_by_name[rpc].output_type.name
    assert rejection.code != grpc.StatusCode.INTERNAL
    assert len(rejection.message) < 300  # details travel in gRPC metadata: never the whole (9000-char) name


@pytest.mark.parametrize("rpc, request_message", ACCEPTED,
                         ids=[f"{rpc}-{index}" for index, (rpc, _) in enumerate(ACCEPTED)])
def test_what_clients_send_goes_through(rpc, request_message):
    assert validate(rpc, request_message) is None


def test_listing_refusals_carry_a_continuation_token():
    """A Rust client fails on a listing reply without continuationToken (spec §1.5)."""
    for rpc, request_message, _ in REFUSED:
        if rpc.startswith("list") and rpc != "listSubscribers" and rpc != "listCompletedTransactions":
            assert validate(rpc, request_message).reply.HasField("continuationToken")


NAME_TAKERS = {  # RPCs whose only name is a stream's: a bad scope or stream name is refused by each
    "checkStreamExists": lambda scope, stream: info(scope, stream),
    "getCurrentSegments": lambda scope, stream: info(scope, stream),
    "sealStream": lambda scope, stream: info(scope, stream),
    "deleteStream": lambda scope, stream: info(scope, stream),
    "getStreamConfiguration": lambda scope, stream: info(scope, stream),
    "listSubscribers": lambda scope, stream: info(scope, stream),
    "updateStream": lambda scope, stream: config(scope, stream),
    "getSegments": lambda scope, stream: pb.GetSegmentsRequest(streamInfo=info(scope, stream)),
    "isSegmentValid": lambda scope, stream: pb.SegmentId(streamInfo=info(scope, stream)),
    "createTransaction": lambda scope, stream: pb.CreateTxnRequest(streamInfo=info(scope, stream), lease=1),
    "commitTransaction": lambda scope, stream: txn(streamInfo=info(scope, stream)),
    "checkTransactionState": lambda scope, stream: txn(streamInfo=info(scope, stream)),
    "checkScale": lambda scope, stream: pb.ScaleStatusRequest(streamInfo=info(scope, stream)),
}


def _valid(rule, name: str) -> bool:
    try:
        rule(name)
    except naming.InvalidName:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=300), st.from_regex(r"_?[A-Za-z0-9.\-]{1,260}", fullmatch=True)),
       st.sampled_from(sorted(NAME_TAKERS)), st.booleans())
def test_a_name_is_refused_exactly_when_it_breaks_the_naming_rule(name, rpc, as_scope):
    """The rule is wire.naming's (the one the services apply on creation), for scopes and streams alike."""
    scope, stream = (name, "st") if as_scope else ("sc", name)
    rule = naming.validate_scope_name if as_scope else naming.validate_stream_name
    rejection = validate(rpc, NAME_TAKERS[rpc](scope, stream))
    assert (rejection is None) == _valid(rule, name), (rpc, name, rejection)


@given(st.integers(-2**63, 2**63 - 1))
def test_a_segment_id_is_refused_unless_epoch_and_number_are_non_negative(value):
    rejection = validate("getURI", pb.SegmentId(streamInfo=info(), segmentId=value))
    well_formed = value >= 0 and naming.segment_number_of(value) < 2**31
    assert (rejection is None) == well_formed


@given(st.floats(allow_nan=True, allow_infinity=True), st.floats(allow_nan=True, allow_infinity=True))
def test_a_key_range_is_refused_unless_within_zero_one_and_not_empty(low, high):
    rejection = validate("scale", scale(ranges=((low, high),)))
    assert (rejection is None) == (0.0 <= low < high <= 1.0)


# ---------------------------------------------------------------------- decoding and the log


def test_undecodable_bytes_become_undecodable_not_an_exception():
    decode = tolerant(pb.ScopeInfo.FromString)
    assert decode(pb.ScopeInfo(scope="sc").SerializeToString()) == pb.ScopeInfo(scope="sc")
    for garbage in [b"\xff\xff\xff", b"\x0a\x05ab", b"\x0a\x01\xff", b"\x08" + b"\x80" * 11]:
        assert isinstance(decode(garbage), Undecodable), garbage


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bad_requests_are_logged_at_most_once_per_interval(caplog):
    clock = FakeClock()
    bad = BadRequestLog(interval_seconds=10.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="tributary.controller"):
        for number in range(5000):
            bad.note("createScope" if number % 2 else "deleteScope", "invalid scope name ''")
            clock.now += 0.001
        assert bad.lines == 1 and len(caplog.records) == 1  # the first one, at once
        clock.now += 10.0
        bad.note("getURI", "segment id -1 is not a segment id")
        assert bad.lines == 2
        assert "refused 5000 bad controller request(s)" in caplog.records[1].getMessage()
        assert caplog.records[1].by_rpc == {"createScope": 2500, "deleteScope": 2499, "getURI": 1}
        bad.flush()
        assert bad.lines == 2  # nothing new to say
    assert bad.total == 5001 and bad.totals["getURI"] == 1
    assert all(record.exc_info is None for record in caplog.records)


async def test_the_last_refusals_of_a_burst_are_logged_when_the_interval_ends(caplog):
    bad = BadRequestLog(interval_seconds=0.05)
    with caplog.at_level(logging.WARNING, logger="tributary.controller"):
        for _ in range(100):
            bad.note("scale", "key range [nan, 1.0) is not within [0, 1] with low < high")
        assert bad.lines == 1
        await eventually(lambda: bad.lines == 2, "the interval to end and log the rest", timeout=5)
    assert bad.lines == 2 and "refused 99 bad controller request(s)" in caplog.records[-1].getMessage()


# ---------------------------------------------------------------------- the guard on a real gRPC server


class RecordingServicer(pb_grpc.ControllerServiceServicer):
    """Answers two RPCs and records what reached it; every other RPC is UNIMPLEMENTED."""

    def __init__(self):
        self.seen = []

    async def checkScopeExists(self, request, context):
        self.seen.append(request.scope)
        return pb.ExistsResponse(exists=True)

    async def listScopes(self, request, context):
        self.seen.append(request.continuationToken.token)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "invalid continuation token")


async def call(port: int, rpc: str, data: bytes, reply_type):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        return await channel.unary_unary(f"/{SERVICE.full_name}/{rpc}", response_deserializer=reply_type.FromString)(
            data, timeout=10)


async def test_the_server_refuses_bad_requests_before_the_servicer_and_without_tracebacks(caplog):
    servicer = RecordingServicer()
    server, port = await start_grpc_server(servicer, "127.0.0.1", 0)
    try:
        with caplog.at_level(logging.INFO):
            ok = await call(port, "checkScopeExists", pb.ScopeInfo(scope="sc").SerializeToString(), pb.ExistsResponse)
            empty = await call(port, "checkScopeExists", pb.ScopeInfo(scope="").SerializeToString(),
                               pb.ExistsResponse)
            invalid = await call(port, "createScope", pb.ScopeInfo(scope="bad scope").SerializeToString(),
                                 pb.CreateScopeStatus)
            codes = []
            for rpc, garbage in [("checkScopeExists", b"\xff\xff\xff"), ("createScope", b"\x0a\x01\xff"),
                                 ("scale", b"\x12\x05\x01")]:
                with pytest.raises(grpc.aio.AioRpcError) as raised:
                    await call(port, rpc, garbage, pb.ExistsResponse)
                codes.append(raised.value.code())
    finally:
        await server.stop(None)
    assert ok.exists and not empty.exists
    assert invalid.status == pb.CreateScopeStatus.INVALID_SCOPE_NAME  # the servicer's createScope is UNIMPLEMENTED
    assert codes == [grpc.StatusCode.INVALID_ARGUMENT] * 3
    assert servicer.seen == ["sc"]
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR or record.exc_info]
    refusals = [record for record in caplog.records if "bad controller request" in record.getMessage()]
    assert len(refusals) == 1  # the first refusal; the other four wait for the end of the interval


async def test_invalid_argument_answers_of_the_servicer_are_counted_too():
    servicer = RecordingServicer()
    server = grpc.aio.server()
    bad = add_guarded_servicer(servicer, server, BadRequestLog(interval_seconds=60.0))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call(port, "listScopes", pb.ScopesRequest(
                continuationToken=pb.ContinuationToken(token="zz")).SerializeToString(), pb.ScopesResponse)
        await call(port, "checkScopeExists", pb.ScopeInfo(scope="").SerializeToString(), pb.ExistsResponse)
        with pytest.raises(grpc.aio.AioRpcError):
            await call(port, "getURI", b"\xff", pb.NodeUri)
    finally:
        await server.stop(None)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad.totals == {"listScopes": 1, "checkScopeExists": 1, "getURI": 1}
    assert servicer.seen == ["zz"]

