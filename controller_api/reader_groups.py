"""The Controller API's reader-group values: a group's data retention and the configuration it registers.

The SDK exports :class:`StreamDataRetention` (``clients.reader``) and registers each of its groups
with a :class:`ReaderGroupConfiguration`; the controller's reader-group service takes and returns
that value and stores it (``controller.store.records.readers.ReaderGroupConfigRecord``). The
protobuf conversions are in :mod:`controller_api.protobuf`.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid

NIL_GROUP_ID = uuid.UUID(int=0)
"""The reader group id a create sends to have the controller choose one."""

AUTOMATIC_CHECKPOINTS_OFF = -1
"""The ``checkpoint_interval_ms`` of a group without automatic checkpoints."""


class StreamDataRetention(enum.IntEnum):
    """Whether a group holds back its streams' data until it has read it (consumption-based retention).

    * ``NONE``: the group does not subscribe; retention ignores it.
    * ``MANUAL_RELEASE_AT_USER_STREAMCUT``: the group subscribes and releases data up to the cuts the
      application passes to the SDK's ``ReaderGroup.release_at``.
    * ``AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT``: the group subscribes and each checkpoint completed
      through the SDK's ``ReaderGroup.initiate_checkpoint`` releases the data before it.

    A subscribing group holds its streams from its starting cuts. Retention still truncates a
    stream whose policy's maximum is exceeded (a lagging group loses the oldest data then), and
    only streams with a retention policy are truncated at all. Values as Java's and the wire's
    (``ReaderGroupConfiguration.RetentionType``: NONE, MANUAL, AUTOMATIC).
    """

    NONE = 0
    MANUAL_RELEASE_AT_USER_STREAMCUT = 1
    AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT = 2


@dataclasses.dataclass(frozen=True)
class ReaderGroupConfiguration:
    """A reader group's configuration as the controller registers it (Java's ``ReaderGroupConfig``).

    * ``reader_group_id``: the group's id (:data:`NIL_GROUP_ID` in a create: the controller picks one);
    * ``generation``: grows with every update;
    * ``group_refresh_time_ms``, ``checkpoint_interval_ms`` (:data:`AUTOMATIC_CHECKPOINTS_OFF`: none)
      and ``max_outstanding_checkpoints``: the readers' settings, kept for Java clients;
    * ``retention_type``: whether the group subscribes to its streams (:class:`StreamDataRetention`);
    * ``rollover_size_bytes``: of the group's state stream (0: the default);
    * ``starting_cuts``, ``ending_cuts``: ``"scope/stream"`` -> ``{segment id: offset}``.
    """

    reader_group_id: uuid.UUID = NIL_GROUP_ID
    generation: int = 0
    group_refresh_time_ms: int = 0
    checkpoint_interval_ms: int = 0
    max_outstanding_checkpoints: int = 0
    retention_type: StreamDataRetention = StreamDataRetention.NONE
    rollover_size_bytes: int = 0
    starting_cuts: dict[str, dict[int, int]] = dataclasses.field(default_factory=dict)
    ending_cuts: dict[str, dict[int, int]] = dataclasses.field(default_factory=dict)

