"""Configuration of the client, its writers and its readers: every limit has a name and a default.

Defaults, and where they differ from Pravega's Java and Rust clients (client
reference §8), are explained field by field; ``docs/sdk.md`` lists the choices.
"""

from __future__ import annotations

import dataclasses

from coordination.retry import Backoff
from wire.constants import MAX_EVENT_SIZE, MAX_READ_SIZE

from .errors import InvalidArgument

MIB = 1024 * 1024


def _reconnect_policy() -> Backoff:
    # Java gives up after ~91 s, Rust never; we keep trying for two minutes so that a
    # segment store restart (seconds) is ridden out, then fail what is pending.
    return Backoff(initial_seconds=0.01, multiplier=2.0, max_delay_seconds=1.0, attempts=None, total_seconds=120.0)


@dataclasses.dataclass(frozen=True)
class ClientConfig:
    """Settings of a :class:`~clients.client.Client`.

    ``controller_retry`` bounds every controller call (then ControllerUnavailable or
    the call's typed error); ``request_timeout_seconds`` bounds one segment-store
    request/reply; ``connect_timeout_seconds`` one TCP connect + Hello.

    A segment-store connection quiet for ``keepalive_seconds`` sends a KeepAlive (the store
    echoes it at once, even while it holds a tail read), and one that heard nothing for three
    times that (3 s by default), or a connect that got no Hello back in that time, is taken for
    a store that is gone: it is dropped, and its writers, readers and calls ask the controller
    where their segments live now. The bound is meant to be well under a cluster's ZooKeeper
    session timeout (4 s in docs/cluster.md, 10 s in Pravega), so that a paused or cut-off
    store costs a writer about session timeout + rebalance grace + recovery, however long it
    stays away. A store that was only slow costs a reconnect and a resend (deduplicated by
    event number). (Java pings after 10 s of quiet and gives up after 3 min; Rust never pings.)

    ``credentials`` (user, password) authenticate the client to a controller that runs
    with a password file, and make it fetch delegation tokens for the segment stores.
    A ``tls://`` controller URI means TLS to the controller and to the segment stores;
    ``tls_trust`` names a PEM file of the CA certificates to trust (None: the system's).
    """

    controller_retry: Backoff = dataclasses.field(default_factory=lambda: Backoff(
        initial_seconds=0.01, multiplier=3.0, max_delay_seconds=2.0, attempts=None, total_seconds=30.0))
    controller_rpc_timeout_seconds: float = 120.0
    # Bounds every raw segment-store call (stream management, reader-group state): long enough to ride out a
    # segment store's failover in a cluster (its containers recovered elsewhere within seconds).
    segment_store_retry: Backoff = dataclasses.field(default_factory=lambda: Backoff(
        initial_seconds=0.01, multiplier=3.0, max_delay_seconds=1.0, attempts=None, total_seconds=30.0))
    request_timeout_seconds: float = 30.0
    connect_timeout_seconds: float = 10.0
    endpoint_cache_seconds: float = 60.0
    keepalive_seconds: float = 1.0
    credentials: tuple[str, str] | None = dataclasses.field(default=None, repr=False)
    tls_trust: str | None = None

    def __post_init__(self) -> None:
        if self.credentials is not None and (len(self.credentials) != 2 or ":" in self.credentials[0]
                                             or not self.credentials[0]):
            raise InvalidArgument("credentials are (user, password), and a user name is non-empty without ':'")


@dataclasses.dataclass(frozen=True)
class WriterConfig:
    """Settings of an event writer (and of the segment writers of transactions).

    * ``max_inflight_events`` / ``max_inflight_bytes``: events written but not yet
      acknowledged; ``write`` waits while either limit is reached. (Java: unbounded;
      Rust: 16 MiB of payload.)
    * ``block_size_bytes``: a segment's pending events are sent as one append block
      once they reach this size, and otherwise at the end of the event-loop turn in
      which they were written (Java batches by time, Rust sends one block per ack).
    * ``retry``: how long to keep reconnecting a segment writer before every pending
      event fails.
    * ``ack_timeout_seconds``: appends unacknowledged for this long mean a silent
      connection: it is dropped and the writer reconnects and resends.
    * ``writer_id``: the application-level id reported with writer marks and
      transaction commits (a random one by default).
    * ``transaction_lease_ms``: the lease of each transaction (Rust 90 s, Java 600 s).
    """

    max_inflight_events: int = 200_000
    max_inflight_bytes: int = 32 * MIB
    block_size_bytes: int = 1 * MIB
    retry: Backoff = dataclasses.field(default_factory=_reconnect_policy)
    ack_timeout_seconds: float = 30.0
    writer_id: str | None = None
    transaction_lease_ms: int = 90_000
    large_event_buffer_bytes: int = 16 * MIB

    def __post_init__(self) -> None:
        if self.max_inflight_events < 1 or self.max_inflight_bytes < MAX_EVENT_SIZE + 8:
            raise InvalidArgument("the in-flight window must hold at least one event of the largest size (8 MiB)")
        if not 1024 <= self.block_size_bytes <= MAX_EVENT_SIZE + 8:
            raise InvalidArgument("block_size_bytes must be between 1 KiB and 8 MiB + 8")
        if self.ack_timeout_seconds <= 0:
            raise InvalidArgument("ack_timeout_seconds must be positive")
        if not 10_000 <= self.transaction_lease_ms <= 600_000:
            raise InvalidArgument("transaction_lease_ms must be between 10 s and 600 s")
        if self.large_event_buffer_bytes < 64 * 1024:
            raise InvalidArgument("large_event_buffer_bytes must be at least 64 KiB")


@dataclasses.dataclass(frozen=True)
class ReaderConfig:
    """Settings of a reader.

    * ``read_size_bytes``: the length asked of each segment read (the server answers
      at most 2 MiB); one read is outstanding per segment while another may be buffered.
    * ``max_event_buffer_bytes``: events up to this size are handed over whole
      (``event.data``); larger ones (large events) as a stream of chunks.
    * ``retry``: how long to keep reconnecting before a read fails.
    """

    read_size_bytes: int = MAX_READ_SIZE
    max_event_buffer_bytes: int = 16 * MIB
    retry: Backoff = dataclasses.field(default_factory=_reconnect_policy)

    def __post_init__(self) -> None:
        if not 8 <= self.read_size_bytes <= MAX_READ_SIZE:
            raise InvalidArgument(f"read_size_bytes must be between 8 and {MAX_READ_SIZE}")
        if self.max_event_buffer_bytes < MAX_EVENT_SIZE:
            raise InvalidArgument("max_event_buffer_bytes must hold at least one 8 MiB event")
