"""Checks on a requested stream configuration (spec §3.3, §4.2) before any workflow starts.

The Controller API's values (``controller_api.model``) already refuse fewer than one segment, an
auto-scaling policy without a rate, bad retention bounds and negative sizes; these are the
controller's own limits on top.
"""

from __future__ import annotations

import dataclasses

from controller_api.model import StreamConfiguration

from .context import ServiceSettings
from .errors import InvalidArgument


def unique_tags(tags) -> tuple[str, ...]:
    """Tags as a set that keeps first-seen order (Java stores a set)."""
    return tuple(dict.fromkeys(tags))


def checked_configuration(configuration: StreamConfiguration, settings: ServiceSettings) -> StreamConfiguration:
    """The configuration to store: tags deduplicated.

    Raises:
        InvalidArgument: too many segments, a negative rate or scale factor, or too many or too long tags.
    """
    scaling = configuration.scaling
    if not 1 <= scaling.min_num_segments <= settings.segments_per_epoch_max:
        raise InvalidArgument(f"minNumSegments must be in [1, {settings.segments_per_epoch_max}], "
                              f"got {scaling.min_num_segments}")
    if scaling.target_rate < 0 or scaling.scale_factor < 0:
        raise InvalidArgument("targetRate and scaleFactor must not be negative")
    tags = unique_tags(configuration.tags)
    if len(tags) > settings.tags_max or any(not tag or len(tag) > settings.tag_length_max for tag in tags):
        raise InvalidArgument(f"at most {settings.tags_max} tags of 1..{settings.tag_length_max} characters")
    return dataclasses.replace(configuration, tags=tags)
