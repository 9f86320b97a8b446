"""The one mapping between the Controller API's values (:mod:`.model`) and its protobuf messages.

Used by the SDK's controller client and by the controller's gRPC service alike. A retention
policy travels only when the stream has one (``retentionType`` UNKNOWN, or no policy, reads as
none); "no maximum" (0 in the model) travels as :data:`~.model.NO_MAXIMUM`; a ``minNumSegments``
below 1 reads as 1. Transaction ids travel as Java's two signed longs.
"""

from __future__ import annotations

import uuid
from typing import cast

from . import controller_pb2 as pb
from .errors import InvalidArgument
from .model import NO_MAXIMUM, RetentionPolicy, RetentionType, ScaleType, ScalingPolicy, StreamConfiguration

_UNSIGNED_64 = 2**64


def stream_info(scope: str, stream: str) -> pb.StreamInfo:
    return pb.StreamInfo(scope=scope, stream=stream)


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
