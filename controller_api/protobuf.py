"""The one mapping between the Controller API's values and its protobuf messages.

The values are :mod:`.model`'s (stream configurations), :mod:`.key_value_tables`' and
:mod:`.reader_groups`'; used by the SDK's controller client and by the controller's gRPC service
alike. A retention policy travels only when the stream has one (``retentionType`` UNKNOWN, or no
policy, reads as none); "no maximum" (0 in the model) travels as :data:`~.model.NO_MAXIMUM`; a
``minNumSegments`` below 1 reads as 1. Transaction ids travel as Java's two signed longs, reader
group ids as UUID text ("" reads as the nil id). Stream cuts of a reader group are keyed
``"scope/stream"`` in the values and sorted by that name on the wire.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import cast

from . import controller_pb2 as pb
from .errors import InvalidArgument
from .key_value_tables import KeyValueTableConfiguration
from .model import NO_MAXIMUM, RetentionPolicy, RetentionType, ScaleType, ScalingPolicy, StreamConfiguration
from .reader_groups import NIL_GROUP_ID, ReaderGroupConfiguration, StreamDataRetention

_UNSIGNED_64 = 2**64


def stream_info(scope: str, stream: str) -> pb.StreamInfo:
    return pb.StreamInfo(scope=scope, stream=stream)


def segment_id(scope: str, stream: str, value: int) -> pb.SegmentId:
    """A SegmentId message: the segment's stream and its id (epoch in the high 32 bits)."""
    return pb.SegmentId(streamInfo=stream_info(scope, stream), segmentId=value)


def stream_cut_to(scope: str, stream: str, positions: Mapping[int, int]) -> pb.StreamCut:
    """A StreamCut message: the stream and ``{segment id: offset}``."""
    return pb.StreamCut(streamInfo=stream_info(scope, stream), cut=positions)


# ---------------------------------------------------------------------- stream configurations


def configuration_to(scope: str, stream: str, configuration: StreamConfiguration) -> pb.StreamConfig:
    """The StreamConfig message of ``scope/stream`` (createStream, updateStream, a getStreamConfiguration reply)."""
    scaling = configuration.scaling
    message = pb.StreamConfig(
        streamInfo=stream_info(scope, stream),
        scalingPolicy=pb.ScalingPolicy(
            scaleType=cast(pb.ScalingPolicy.ScalingPolicyType, int(scaling.scale_type)),  # the same numbers
            targetRate=scaling.target_rate, scaleFactor=scaling.scale_factor,
            minNumSegments=scaling.min_num_segments),
        tags=pb.Tags(tag=list(configuration.tags)), rolloverSizeBytes=configuration.rollover_size_bytes,
        timestampAggregationTimeout=configuration.timestamp_aggregation_timeout_ms)
    retention = configuration.retention
    if retention is not None:
        message.retentionPolicy.CopyFrom(pb.RetentionPolicy(
            retentionType=cast(pb.RetentionPolicy.RetentionPolicyType, int(retention.retention_type)),
            retentionParam=retention.minimum, retentionMax=retention.upper_bound))
    return message


def configuration_from(message: pb.StreamConfig) -> StreamConfiguration:
    """The configuration a StreamConfig message describes.

    Raises:
        InvalidArgument: an unknown scale or retention type, or values the model refuses.
    """
    policy = message.scalingPolicy
    try:
        scale_type = ScaleType(policy.scaleType)
    except ValueError:
        raise InvalidArgument(f"unknown scaleType {policy.scaleType}") from None
    scaling = ScalingPolicy(scale_type, policy.targetRate, policy.scaleFactor, max(1, policy.minNumSegments))
    return StreamConfiguration(scaling, _retention_from(message), tuple(message.tags.tag),
                               message.rolloverSizeBytes, message.timestampAggregationTimeout)


def _retention_from(message: pb.StreamConfig) -> RetentionPolicy | None:
    policy = message.retentionPolicy
    if not message.HasField("retentionPolicy") or policy.retentionType == pb.RetentionPolicy.UNKNOWN:
        return None
    try:
        retention_type = RetentionType(policy.retentionType)
    except ValueError:
        raise InvalidArgument(f"unknown retentionType {policy.retentionType}") from None
    maximum = policy.retentionMax
    return RetentionPolicy(retention_type, policy.retentionParam, 0 if maximum == NO_MAXIMUM else maximum)


# ---------------------------------------------------------------------- transaction ids


def transaction_id_to(transaction_id: uuid.UUID) -> pb.TxnId:
    """The id's most and least significant 64 bits, as Java's signed longs."""
    value = transaction_id.int
    return pb.TxnId(highBits=_signed(value >> 64), lowBits=_signed(value % _UNSIGNED_64))


def transaction_id_from(message: pb.TxnId) -> uuid.UUID:
    return uuid.UUID(int=((message.highBits % _UNSIGNED_64) << 64) | (message.lowBits % _UNSIGNED_64))


def _signed(half: int) -> int:
    return half - _UNSIGNED_64 if half >= 2**63 else half


# ---------------------------------------------------------------------- key-value tables


def key_value_table_to(scope: str, table: str, configuration: KeyValueTableConfiguration) -> pb.KeyValueTableConfig:
    """The KeyValueTableConfig message of ``scope/table`` (createKeyValueTable, a getKeyValueTableConfiguration
    reply)."""
    return pb.KeyValueTableConfig(scope=scope, kvtName=table, partitionCount=configuration.partition_count,
                                  primaryKeyLength=configuration.primary_key_length,
                                  secondaryKeyLength=configuration.secondary_key_length,
                                  rolloverSizeBytes=configuration.rollover_size_bytes)


def key_value_table_from(message: pb.KeyValueTableConfig) -> KeyValueTableConfiguration:
    """The configuration a KeyValueTableConfig message describes. Raises InvalidArgument: values the model
    refuses."""
    return KeyValueTableConfiguration(message.partitionCount, message.primaryKeyLength, message.secondaryKeyLength,
                                      message.rolloverSizeBytes)


# ---------------------------------------------------------------------- reader groups


def reader_group_id_from(text: str) -> uuid.UUID:
    """A reader group id ("" is the nil id). Raises InvalidArgument for a malformed UUID."""
    if not text:
        return NIL_GROUP_ID
    try:
        return uuid.UUID(text)
    except ValueError:
        raise InvalidArgument(f"readerGroupId {text[:40]!r} is not a UUID") from None


def reader_group_to(scope: str, group: str, configuration: ReaderGroupConfiguration) -> pb.ReaderGroupConfiguration:
    """The ReaderGroupConfiguration message of ``scope/group`` (createReaderGroup, updateReaderGroup, the replies
    that carry a configuration)."""
    return pb.ReaderGroupConfiguration(
        scope=scope, readerGroupName=group, groupRefreshTimeMillis=configuration.group_refresh_time_ms,
        automaticCheckpointIntervalMillis=configuration.checkpoint_interval_ms,
        maxOutstandingCheckpointRequest=configuration.max_outstanding_checkpoints,
        retentionType=cast(pb.ReaderGroupConfiguration.RetentionType, int(configuration.retention_type)),
        generation=configuration.generation, readerGroupId=str(configuration.reader_group_id),
        startingStreamCuts=_cuts_to(configuration.starting_cuts), endingStreamCuts=_cuts_to(configuration.ending_cuts),
        rolloverSizeBytes=configuration.rollover_size_bytes)


def reader_group_from(message: pb.ReaderGroupConfiguration) -> ReaderGroupConfiguration:
    """The configuration a ReaderGroupConfiguration message describes.

    Raises:
        InvalidArgument: a malformed id or an unknown retention type.
    """
    try:
        retention_type = StreamDataRetention(message.retentionType)
    except ValueError:
        raise InvalidArgument(f"unknown reader group retention type {message.retentionType}") from None
    return ReaderGroupConfiguration(
        reader_group_id_from(message.readerGroupId), message.generation, message.groupRefreshTimeMillis,
        message.automaticCheckpointIntervalMillis, message.maxOutstandingCheckpointRequest, retention_type,
        message.rolloverSizeBytes, _cuts_from(message.startingStreamCuts), _cuts_from(message.endingStreamCuts))


def _cuts_to(cuts: Mapping[str, Mapping[int, int]]) -> list[pb.StreamCut]:
    result = []
    for scoped, positions in sorted(cuts.items()):
        scope, _, stream = scoped.partition("/")
        result.append(stream_cut_to(scope, stream, positions))
    return result


def _cuts_from(cuts: Iterable[pb.StreamCut]) -> dict[str, dict[int, int]]:
    return {f"{cut.streamInfo.scope}/{cut.streamInfo.stream}": dict(cut.cut) for cut in cuts}
