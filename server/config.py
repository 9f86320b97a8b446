"""Segment store configuration (defaults are the embedded standalone's)."""

from __future__ import annotations

import dataclasses
import pathlib

from .containers import LoadSettings

DEFAULT_PORT = 12345
WILDCARD_HOSTS = ("0.0.0.0", "::", "")  # listen addresses no client can connect to
MIN_LOG_FILE_SIZE = 16 * 1024 * 1024  # a Tier-1 log file holds at least one largest record (8 MiB + 64 KiB)


@dataclasses.dataclass
class SegmentStoreConfig:
    data_dir: pathlib.Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    container_count: int = 4
    append_bytes_outstanding_max: int = 64 * 1024 * 1024  # per connection, before reading pauses
    write_buffer_high: int = 8 * 1024 * 1024  # per connection unsent output, before reading pauses
    tail_read_timeout: float = 60.0  # a read parked at the tail longer than this closes its connection
    transient_idle_seconds: float = 600.0  # unmerged transient segments idle this long are deleted
    # A writer's attribute (its last event number: deduplication after it reconnects) is removed once the writer
    # has not appended for this long and no connection has it set up (0: never; SegmentContainer.expire_writers).
    writer_retention_seconds: float = 86_400.0
    # Segments one container may hold (its own and the controller's _system segments aside): every segment's
    # metadata stays in memory (~1 KB in use, ~0.3 KB dormant), so this bounds a store's memory; creations past it
    # are refused.
    max_segments_per_container: int = 500_000
    # A segment neither changed for this long nor read meanwhile goes dormant: its metadata is kept packed (~0.3 KB
    # instead of ~1 KB) until it is used again (0: never; server/containers/dormancy.py).
    segment_idle_seconds: float = 300.0
    # Past this many live segments in a container, those not used since the previous look go dormant at once.
    segment_working_set: int = 100_000
    checkpoint_every_operations: int = 50_000
    checkpoint_every_bytes: int = 16 * 1024 * 1024  # logged bytes between checkpoints (the log truncation step)
    # A container whose newest checkpoint is this old logs one if operations followed it: a quiet container's
    # log is then truncated past what Tier-2 holds (needs a Tier-2).
    checkpoint_interval_seconds: float = 60.0
    # What a container's log may hold to replay at a restart (bytes logged since its first checkpoint, and
    # operations): past either, appends wait store-wide while Tier-2 catches up (replay_bound.py). Recovery
    # time is bounded by these, not by the cache size.
    replay_bytes_max: int = 256 * 1024 * 1024
    replay_operations_max: int = 250_000
    log_file_size: int = 64 * 1024 * 1024
    log_spare_files: int = 2  # local log: files freed by truncation kept for reuse per container; the rest deleted
    # Tier-1: "local" (an fsync'd log per container under the data dir, the embedded default), "replicated"
    # (ledgers on `tributary logstore` replicas, metadata in ZooKeeper at zk_hosts; docs/replicated-log.md) or
    # "memory" (kept in this process only, lost when it exits: for tests and embedding; tier1/memory.py).
    tier1: str = "local"
    zk_hosts: str = ""  # "host:port[,host:port][/chroot]"
    zk_root: str = "/tributary"
    zk_session_timeout: float = 10.0  # a dead owner's containers can be taken over this long after it stopped
    log_quorum: tuple[int, int, int] = (3, 3, 2)  # replicated log: ensemble size, write quorum, ack quorum
    ledger_size_max: int = 256 * 1024 * 1024  # replicated log: bytes per ledger before it rolls to a new one
    # Security (docs/security.md): with a token key, every request must carry a delegation token the controller
    # signed with the same key; with a certificate and key, clients connect over TLS.
    token_key: bytes | None = None
    tls_cert: pathlib.Path | None = None
    tls_key: pathlib.Path | None = None
    # Cluster mode (docs/cluster.md): register in ZooKeeper and run only the containers the controller leader's
    # map gives this store; clients are told (getURI) to use advertise_host:port (default: host).
    cluster: bool = False
    advertise_host: str | None = None
    cluster_poll_interval: float = 2.0  # seconds between reads of the container map besides its watch
    log_open_wait: float = 60.0  # seconds a container keeps trying to open a busy or unavailable log at start
    tier2_open_wait: float = 10.0  # seconds a container keeps trying at start while Tier-2 does not answer
    # Tier-2: "filesystem" (under <data dir>/tier2, the embedded default), "s3", or "none" (all bytes in memory,
    # the log never truncated: for tests of Tier-1 alone).
    tier2: str = "filesystem"
    tier2_dir: pathlib.Path | None = None  # filesystem Tier-2 root; default <data dir>/tier2
    s3_bucket: str = ""
    s3_prefix: str = ""
    s3_endpoint: str | None = None  # e.g. http://127.0.0.1:5000 for a local S3-compatible server
    s3_region: str | None = None
    cache_size: int = 512 * 1024 * 1024  # bytes of segment data kept in memory, all containers together
    max_chunk_size: int = 256 * 1024 * 1024  # Tier-2 chunks roll over at this size (truncation frees whole chunks)
    gc_delay_seconds: float = 5.0  # Tier-2 chunks freed by truncation or deletion are deleted this much later
    flush_size: int = 4 * 1024 * 1024  # a segment with this many unflushed bytes is written to Tier-2 at once
    # A table segment is compacted (live entries re-written at its end, the rest truncated) once its dead records
    # outweigh its live ones and this many bytes (table_maintenance.py; docs/operations.md, "Disk space").
    table_compaction_threshold: int = 1024 * 1024
    flush_interval: float = 2.0  # seconds before fewer unflushed bytes are written anyway
    tier2_timeout: float = 60.0  # seconds after which a Tier-2 call counts as failed (and is retried)
    # Auto-scaling: each container measures its rate-policy segments and appends hot/cold reports to its report
    # segment for the controller (windows, cooldown, mute, tick; docs/operations.md).
    load: LoadSettings = dataclasses.field(default_factory=LoadSettings)

    def __post_init__(self):
        self.data_dir = pathlib.Path(self.data_dir)
        if not 1 <= self.container_count <= 4096:
            raise ValueError("container_count must be in [1, 4096]")
        if not 0 <= self.port <= 65535:
            raise ValueError("port must be in [0, 65535]")
        if self.tier2 not in ("filesystem", "s3", "none"):
            raise ValueError("tier2 must be one of filesystem, s3, none")
        if self.tier2 == "s3" and not self.s3_bucket:
            raise ValueError("an S3 Tier-2 needs a bucket")
        if self.cache_size < 16 * 1024 * 1024:
            raise ValueError("cache_size must be at least 16 MiB")
        if self.tier2_dir is not None:
            self.tier2_dir = pathlib.Path(self.tier2_dir)
        if self.tier1 not in ("local", "replicated", "memory"):
            raise ValueError("tier1 must be local, replicated or memory")
        if self.tier1 == "replicated" and not self.zk_hosts:
            raise ValueError("a replicated tier-1 needs ZooKeeper (zk_hosts)")
        ensemble, write_quorum, ack_quorum = self.log_quorum
        if not 1 <= ack_quorum <= write_quorum == ensemble:
            raise ValueError("log quorum must be E/W/A with 1 <= A <= W and W == E")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("TLS needs both a certificate and its private key")
        if self.cluster and self.tier1 != "replicated":
            raise ValueError("cluster mode needs the replicated tier-1 (--tier1 replicated): containers move "
                             "between machines")
        if self.host in WILDCARD_HOSTS and not self.advertise_host:
            raise ValueError(f"listening on {self.host or 'every address'} needs an advertise address "
                             "(the address clients use)")
        if self.checkpoint_interval_seconds <= 0:
            raise ValueError("checkpoint_interval_seconds must be positive")
        if self.replay_bytes_max <= 0 or self.replay_operations_max <= 0:
            raise ValueError("the replay bounds must be positive")
        if self.max_segments_per_container <= 0:
            raise ValueError("max_segments_per_container must be positive")
        if self.segment_idle_seconds < 0:
            raise ValueError("segment_idle_seconds must not be negative")
        if self.segment_working_set <= 0:
            raise ValueError("segment_working_set must be positive")
        if self.log_spare_files < 0:
            raise ValueError("log_spare_files must not be negative")
        if self.gc_delay_seconds < 0:
            raise ValueError("gc_delay_seconds must not be negative")
        if self.max_chunk_size <= 0:
            raise ValueError("max_chunk_size must be positive")
        if self.table_compaction_threshold < 0:
            raise ValueError("table_compaction_threshold must not be negative")
        if self.log_file_size < MIN_LOG_FILE_SIZE:
            raise ValueError(f"log_file_size must be at least {MIN_LOG_FILE_SIZE} (one largest record)")

    @property
    def advertised_host(self) -> str:
        """The host clients are told to connect to."""
        return self.advertise_host or self.host
