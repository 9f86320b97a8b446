"""Checks on a requested stream configuration (spec §3.3, §4.2) before any workflow starts."""

from __future__ import annotations

import dataclasses

from ..store.records import RetentionType, StreamConfiguration
from .context import ServiceSettings
from .errors import InvalidArgument


def unique_tags(tags) -> tuple[str, ...]:
    """Tags as a set that keeps first-seen order (Java stores a set)."""
    return tuple(dict.fromkeys(tags))


def checked_configuration(configuration: StreamConfiguration, settings: ServiceSettings) -> StreamConfiguration:
    """The configuration to store: tags deduplicated, ``updating`` cleared.

    Raises:
        InvalidArgument: fewer than 1 or too many segments, a negative rate, scale factor,
            retention, rollover size or timeout, or too many or too long tags.
    """
    scaling = configuration.scaling
    if not 1 <= scaling.min_num_segments <= settings.segments_per_epoch_max:
        raise InvalidArgument(f"minNumSegments must be in [1, {settings.segments_per_epoch_max}], "
                              f"got {scaling.min_num_segments}")
    if scaling.target_rate < 0 or scaling.scale_factor < 0:
        raise InvalidArgument("targetRate and scaleFactor must not be negative")
    retention = configuration.retention
    if retention is not None and (retention.retention_param < 0 or retention.retention_max < retention.retention_param):
        raise InvalidArgument("retention needs 0 <= retentionParam <= retentionMax")
    if configuration.rollover_size_bytes < 0 or configuration.timestamp_aggregation_timeout < 0:
        raise InvalidArgument("rolloverSizeBytes and timestampAggregationTimeout must not be negative")
    tags = unique_tags(configuration.tags)
    if len(tags) > settings.tags_max or any(not tag or len(tag) > settings.tag_length_max for tag in tags):
        raise InvalidArgument(f"at most {settings.tags_max} tags of 1..{settings.tag_length_max} characters")
    if retention is not None and retention.retention_type == RetentionType.UNKNOWN:
        retention = None
    return dataclasses.replace(configuration, retention=retention, tags=tags, updating=False, tags_to_remove=())


def same_settings(first: StreamConfiguration, second: StreamConfiguration) -> bool:
    """Equal policies, tags and limits, ignoring the workflow bookkeeping fields."""
    return (dataclasses.replace(first, updating=False, tags_to_remove=())
            == dataclasses.replace(second, updating=False, tags_to_remove=()))
