"""The ``tributary`` command line.

Options, banners and signals: the serving subcommands turn their options into the
configurations of ``tributary.assembly``'s objects (the processes, assembled from the server
and the controller) and run one until SIGTERM or SIGINT. Each subcommand prints a clear error
and exits non-zero when it cannot do its job.
"""

from __future__ import annotations

import asyncio
import gc
import pathlib
import signal
import sys
from collections.abc import Callable

import click

from . import __version__, assembly, logs

_LOG_LEVELS = click.Choice(["debug", "info", "warning", "error"], case_sensitive=False)
_REST_PORT = click.option("--rest-port", type=click.IntRange(0, 65535), default=None,
                          help="Serve the REST admin API (/v1, /openapi.json) and the web console (/console/) on "
                               "this HTTP port (same address as --host) [default: off].")
_METRICS_PORT = click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
                             help="Serve /metrics (Prometheus), /health/live and /health/ready on this HTTP port "
                                  "(same address as --host) [default: off].")
_RETENTION_PERIOD = click.option(
    "--retention-period", "retention_period", default=1800.0, show_default=True, type=click.FloatRange(0.1),
    help="Seconds between retention rounds: each records a stream cut of every stream with a retention policy "
         "and truncates it as far as the policy's minimum and maximum and its subscribed reader groups allow.")
_WATERMARK_PERIOD = click.option(
    "--watermark-period", "watermark_period", default=10.0, show_default=True, type=click.FloatRange(0.05),
    help="Seconds between watermarking rounds: each turns the time marks writers noted into a watermark "
         "in every stream's _MARK<stream> stream.")
_TRANSACTION_LEASE_GRACE = click.option(
    "--transaction-lease-grace", "transaction_lease_grace", default=180.0, show_default=True,
    type=click.FloatRange(0), metavar="SECONDS",
    help="Seconds an open transaction is kept after its lease ran out without a ping, before it is aborted. "
         "The default covers the `pravega` (Rust) client, whose pinger sleeps a whole lease between rounds and "
         "takes one new transaction per round; with only Java or Tributary clients, 0 aborts a dead process's "
         "transaction a lease after its last ping.")
_AUTO_SCALE_COLD_MARK = click.option(
    "--auto-scale-cold-mark", "auto_scale_cold_mark", default=600.0, show_default=True, type=click.FloatRange(0.001),
    help="Seconds a segment reported cold stays cold for merging (one reported idle: until sealed); older load "
         "reports are ignored and the report segments truncated behind them.")
SEGMENT_STORE_WAIT_SECONDS = 30.0  # `tributary controller` waits this long for its segment store


@click.group()
@click.version_option(__version__, prog_name="tributary")
def main() -> None:
    """Tributary, a Pravega-compatible streaming store."""


def _segment_store_options(function):
    for option in reversed([
        click.option("--data-dir", type=click.Path(file_okay=False, path_type=pathlib.Path), default="./data",
                     show_default=True, help="Directory for the container logs and the filesystem Tier-2."),
        click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on."),
        click.option("--advertise-address", "advertise_host", default=None,
                     help="Address clients are told to use [default: --host; required with a wildcard --host]."),
        click.option("--port", default=12345, show_default=True, type=click.IntRange(0, 65535),
                     help="Wire-protocol (segment store) port."),
        click.option("--containers", "container_count", default=4, show_default=True,
                     type=click.IntRange(1, 4096), help="Segment containers (fixed per data dir)."),
        click.option("--log-file-size", "log_file_mib", default=64, show_default=True, type=click.IntRange(16),
                     help="Size of each Tier-1 log file in MiB (files are preallocated)."),
        click.option("--tier2", default="filesystem", show_default=True,
                     type=click.Choice(["filesystem", "s3", "none"]),
                     help="Tier-2 storage: files under --tier2-dir, an S3 bucket, or none (all data in memory)."),
        click.option("--tier2-dir", type=click.Path(file_okay=False, path_type=pathlib.Path), default=None,
                     help="Filesystem Tier-2 root [default: DATA_DIR/tier2]."),
        click.option("--s3-bucket", default="", help="S3 Tier-2 bucket (credentials: the usual AWS variables)."),
        click.option("--s3-prefix", default="", help="Key prefix of every S3 object."),
        click.option("--s3-endpoint", default=None, help="S3 endpoint URL, e.g. a local S3-compatible server."),
        click.option("--s3-region", default=None, help="S3 region."),
        click.option("--cache-size", "cache_mib", default=512, show_default=True, type=click.IntRange(16),
                     help="MiB of segment data cached in memory (flushed data is evicted first)."),
        click.option("--checkpoint-size", "checkpoint_mib", default=16, show_default=True, type=click.IntRange(1),
                     help="MiB logged in Tier-1 between two container checkpoints (the log is truncated at "
                          "checkpoints once Tier-2 holds what precedes them)."),
        click.option("--checkpoint-interval", default=60.0, show_default=True, type=click.FloatRange(0.1),
                     help="Seconds after which a container checkpoints anyway if operations followed its newest "
                          "checkpoint (so a quiet container's Tier-1 log is truncated too)."),
        click.option("--replay-max", "replay_mib", default=256, show_default=True, type=click.IntRange(1),
                     help="MiB a container's Tier-1 log may hold for a restart to replay (logged since its first "
                          "checkpoint, not yet truncated because Tier-2 lacks it); past it, appends wait while "
                          "Tier-2 catches up (a checkpoint is logged and the log truncated). Bounds recovery time."),
        click.option("--replay-max-operations", "replay_operations_max", default=250_000, show_default=True,
                     type=click.IntRange(1), help="Operations a container's log may hold to replay (as --replay-max)."),
        click.option("--max-segments-per-container", default=500_000, show_default=True, type=click.IntRange(1),
                     help="Segments a container may hold (every segment's metadata stays in memory: about 1 KB in "
                          "use, 0.3 KB dormant); creations past it are refused with a clear error. System segments "
                          "aside."),
        click.option("--segment-idle", default=300.0, show_default=True, type=click.FloatRange(0),
                     help="Seconds after which a segment neither written nor read goes dormant: its metadata is "
                          "kept packed (about 0.3 KB instead of 1 KB) until it is used again (0: never)."),
        click.option("--segment-working-set", default=100_000, show_default=True, type=click.IntRange(1),
                     help="Live segments a container keeps: past it, those not used lately go dormant without "
                          "waiting for --segment-idle, oldest first."),
        click.option("--writer-retention", default=86_400.0, show_default=True, type=click.FloatRange(0),
                     help="Seconds after which the attribute of a writer that stopped appending (its last event "
                          "number, for deduplication when it reconnects) is removed, unless a connection has it set "
                          "up; bounds what writer ids that come and go cost (0: kept forever)."),
        click.option("--log-spare-files", default=2, show_default=True, type=click.IntRange(0),
                     help="Tier-1 log files freed by truncation that each container keeps for reuse (local "
                          "Tier-1); the others are deleted."),
        click.option("--max-chunk-size", "max_chunk_mib", default=256, show_default=True, type=click.IntRange(1),
                     help="MiB after which a segment's Tier-2 chunk rolls over (truncation frees whole chunks)."),
        click.option("--gc-delay", default=5.0, show_default=True, type=click.FloatRange(0),
                     help="Seconds before Tier-2 chunks freed by truncation or deletion are deleted."),
        click.option("--auto-scale/--no-auto-scale", "auto_scale", default=True, show_default=True,
                     help="Measure the load of segments with a rate policy and report hot and cold ones for "
                          "auto-scaling (standalone: and act on the reports)."),
        click.option("--auto-scale-windows", default="120,300,600,1200", show_default=True,
                     help="Seconds of the short, medium, long and idle load windows: hot when a window's rate is "
                          "over 5x, 2x, 1x the target; cold when all are under it and the idle one under half."),
        click.option("--auto-scale-cooldown", default=600.0, show_default=True, type=click.FloatRange(0),
                     help="Seconds after a segment's creation (or a segment store's start) before it is reported."),
        click.option("--auto-scale-mute", default=600.0, show_default=True, type=click.FloatRange(0),
                     help="Seconds after a report before a segment is reported again in that direction."),
        click.option("--auto-scale-tick", default=5.0, show_default=True, type=click.FloatRange(0.001),
                     help="Seconds between folds of the counted load into the window rates."),
        click.option("--auto-scale-report-interval", default=120.0, show_default=True, type=click.FloatRange(0),
                     help="Seconds between judgements of a segment with traffic."),
        click.option("--tier1", default="local", show_default=True,
                     type=click.Choice(["local", "replicated", "memory"]),
                     help="Tier-1 log: local files under --data-dir, ledgers on `tributary logstore` replicas, or "
                          "this process's memory (not durable: lost when the process exits; for tests)."),
        click.option("--zk", "zk_hosts", default="", help="ZooKeeper HOST:PORT[,HOST:PORT][/chroot] (replicated)."),
        click.option("--zk-root", default="/tributary", show_default=True, help="ZooKeeper path of Tributary's nodes."),
        click.option("--zk-session-timeout", default=10.0, show_default=True, type=click.FloatRange(1, 120),
                     help="Seconds; a stopped owner's containers can be taken over this long after it stopped."),
        click.option("--log-quorum", default="3/3/2", show_default=True,
                     help="Replicated log: ensemble size / write quorum / ack quorum."),
        click.option("--ledger-size", "ledger_mib", default=256, show_default=True, type=click.IntRange(1),
                     help="Replicated log: MiB written to a ledger before the log rolls to a new one."),
        click.option("--cluster", is_flag=True,
                     help="Join a cluster through --zk: run only the containers the controller leader assigns "
                          "(needs --tier1 replicated and a Tier-2 every store shares)."),
        click.option("--token-key-file", type=click.Path(dir_okay=False, exists=True, path_type=pathlib.Path),
                     default=None, help="Require delegation tokens signed with the key in this file (the "
                                        "controller's --token-key-file; docs/security.md)."),
        click.option("--tls-cert", type=click.Path(dir_okay=False, exists=True, path_type=pathlib.Path),
                     default=None, help="Serve TLS with this certificate chain (PEM); needs --tls-key."),
        click.option("--tls-key", type=click.Path(dir_okay=False, exists=True, path_type=pathlib.Path),
                     default=None, help="The private key (PEM) of --tls-cert."),
        click.option("--log-level", default="warning", show_default=True, type=_LOG_LEVELS),
        _METRICS_PORT,
    ]):
        function = option(function)
    return function


def _segment_store_config(data_dir, host, advertise_host, port, container_count, log_file_mib, tier2, tier2_dir,
                          s3_bucket, s3_prefix, s3_endpoint, s3_region, cache_mib, checkpoint_mib, checkpoint_interval,
                          replay_mib, replay_operations_max, max_segments_per_container, writer_retention,
                          segment_idle, segment_working_set,
                          log_spare_files, max_chunk_mib,
                          gc_delay, auto_scale, auto_scale_windows, auto_scale_cooldown, auto_scale_mute,
                          auto_scale_tick, auto_scale_report_interval, tier1, zk_hosts, zk_root, zk_session_timeout,
                          log_quorum, ledger_mib, cluster, token_key_file, tls_cert, tls_key,
                          token_key: bytes | None = None):
    from server.config import SegmentStoreConfig

    if cluster and not zk_hosts:
        raise click.UsageError("--cluster needs --zk")
    load = _load_settings(auto_scale, auto_scale_windows, auto_scale_cooldown, auto_scale_mute, auto_scale_tick,
                          auto_scale_report_interval)
    try:
        return SegmentStoreConfig(data_dir=data_dir, host=host, advertise_host=advertise_host, cluster=cluster,
                                  port=port, container_count=container_count,
                                  log_file_size=log_file_mib * 1024 * 1024, tier2=tier2, tier2_dir=tier2_dir,
                                  s3_bucket=s3_bucket, s3_prefix=s3_prefix, s3_endpoint=s3_endpoint,
                                  s3_region=s3_region, cache_size=cache_mib * 1024 * 1024,
                                  checkpoint_every_bytes=checkpoint_mib * 1024 * 1024,
                                  checkpoint_interval_seconds=checkpoint_interval, log_spare_files=log_spare_files,
                                  replay_bytes_max=replay_mib * 1024 * 1024,
                                  replay_operations_max=replay_operations_max,
                                  writer_retention_seconds=writer_retention, segment_idle_seconds=segment_idle,
                                  segment_working_set=segment_working_set,
                                  max_segments_per_container=max_segments_per_container,
                                  max_chunk_size=max_chunk_mib * 1024 * 1024, gc_delay_seconds=gc_delay, tier1=tier1,
                                  zk_hosts=zk_hosts, zk_root=zk_root, zk_session_timeout=zk_session_timeout,
                                  log_quorum=_quorum(log_quorum), ledger_size_max=ledger_mib * 1024 * 1024,
                                  token_key=_token_key(token_key_file) if token_key_file else token_key,
                                  tls_cert=tls_cert, tls_key=tls_key, load=load)
    except ValueError as error:
        raise click.UsageError(str(error)) from None


def _load_settings(enabled: bool, windows: str, cooldown: float, mute: float, tick: float, report_interval: float):
    """The segment store's load measurement (auto-scaling) from the --auto-scale-* options."""
    from server.containers import LoadSettings

    try:
        short, medium, long, idle = (float(part) for part in windows.split(","))
        return LoadSettings(enabled=enabled, tick_seconds=tick, short_window_seconds=short,
                            medium_window_seconds=medium, long_window_seconds=long, idle_window_seconds=idle,
                            cooldown_seconds=cooldown, mute_seconds=mute, report_interval_seconds=report_interval)
    except ValueError as error:
        raise click.UsageError(f"--auto-scale-windows {windows!r}: four positive numbers of seconds "
                               f"(short,medium,long,idle) are needed ({error})") from None


TOKEN_KEY_BYTES_MIN = 64  # HS512 signs with SHA-512: a shorter key weakens it (and PyJWT warns at every use)


def _token_key(path: pathlib.Path) -> bytes:
    key = path.read_bytes().strip()
    if len(key) < TOKEN_KEY_BYTES_MIN:
        raise click.UsageError(f"{path}: a token key needs at least {TOKEN_KEY_BYTES_MIN} bytes, it has {len(key)} "
                               "(make one with `head -c 48 /dev/urandom | base64 > token.key`)")
    return key


def _controller_security(password_file, token_key_file, token_ttl, tls_cert, tls_key, tls_trust,
                         token_key: bytes | None = None, trust_own_certificate: bool = False) -> dict:
    """The ControllerApp options of the security flags (nothing when they are absent)."""
    from controller.security import InvalidPasswordFile, Security, TlsFiles

    options: dict = {}
    if password_file is not None:
        key = _token_key(token_key_file) if token_key_file else token_key
        if key is None:
            raise click.UsageError("--password-file needs --token-key-file (the key segment stores verify tokens "
                                   "with)")
        try:
            options["security"] = Security.from_files(password_file, key, token_ttl)
        except (InvalidPasswordFile, OSError) as error:
            raise click.UsageError(str(error)) from None
    elif token_key_file is not None:
        raise click.UsageError("--token-key-file without --password-file: give both to turn authentication on")
    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("TLS needs both --tls-cert and --tls-key")
    if tls_cert is not None:
        options["tls"] = TlsFiles(tls_cert, tls_key, tls_trust, trust_own_certificate)
        _check_tls_files(options["tls"])
    return options


def _check_tls_files(tls) -> None:
    """A bad certificate, key or trust file stops the command before anything starts: one line naming the
    file and what is wrong with it, exit status 1."""
    from coordination.tls_files import TlsFileError

    try:
        tls.check()
    except TlsFileError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)


def _security_options(function):
    for option in reversed([
        click.option("--password-file", type=click.Path(dir_okay=False, exists=True, path_type=pathlib.Path),
                     default=None, help="Turn authentication on: users, password hashes and ACLs "
                                        "(`tributary passwd`; docs/security.md)."),
        click.option("--token-ttl", default=600, show_default=True, type=click.IntRange(10),
                     help="Seconds a delegation token lasts."),
        click.option("--tls-trust", type=click.Path(dir_okay=False, exists=True, path_type=pathlib.Path),
                     default=None, help="CA certificates (PEM) to trust in the segment stores' TLS "
                                        "[default: the system's]."),
    ]):
        function = option(function)
    return function


def _quorum(text: str) -> tuple[int, int, int]:
    parts = text.split("/")
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        raise click.BadParameter(f"expected E/W/A such as 3/3/2, got {text!r}", param_hint="--log-quorum")
    ensemble, write_quorum, ack_quorum = (int(part) for part in parts)
    return ensemble, write_quorum, ack_quorum


def _endpoint(text: str) -> tuple[str, int]:
    host, separator, port = text.rpartition(":")
    if not separator or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


@main.command()
@_segment_store_options
def segmentstore(log_level, metrics_port, **options) -> None:
    """Run one segment store."""
    logs.configure(log_level)
    _run_or_exit(_serve_segment_store(_segment_store_config(**options), metrics_port))


@main.command()
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=pathlib.Path), default="./logstore",
              show_default=True, help="Directory of the journal (and the replica's identity).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=12400, show_default=True, type=click.IntRange(0, 65535), help="Log store port.")
@click.option("--advertise-address", "--advertise-host", "advertise_host", default=None,
              help="Address writers use to reach it [default: --host].")
@click.option("--zk", "zk_hosts", required=True, help="ZooKeeper HOST:PORT[,HOST:PORT][/chroot].")
@click.option("--zk-root", default="/tributary", show_default=True, help="ZooKeeper path of Tributary's nodes.")
@click.option("--gc-interval", default=60.0, show_default=True, type=click.FloatRange(0.1),
              help="Seconds between collections of ledgers no log names any more.")
@click.option("--journal-file-size", "journal_mib", default=64, show_default=True, type=click.IntRange(1),
              help="Size of each journal file in MiB (files are preallocated).")
@click.option("--log-level", default="warning", show_default=True, type=_LOG_LEVELS)
@_METRICS_PORT
def logstore(data_dir, host, port, advertise_host, zk_hosts, zk_root, gc_interval, journal_mib, log_level,
             metrics_port) -> None:
    """Run one log store: a replica of the replicated Tier-1 log (a "bookie")."""
    logs.configure(log_level)
    if advertise_host is None and host in ("0.0.0.0", "::", ""):
        raise click.UsageError("listening on a wildcard address needs --advertise-address (the address writers use)")
    _run_or_exit(_serve_logstore(data_dir, host, port, advertise_host, zk_hosts, zk_root, gc_interval,
                                 journal_mib * 1024 * 1024, metrics_port))


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--advertise-address", "advertise_host", default=None,
              help="Address clients are told to use [default: --host; required with a wildcard --host].")
@click.option("--port", default=9090, show_default=True, type=click.IntRange(0, 65535), help="gRPC port.")
@click.option("--segment-store", "segment_store", default="127.0.0.1:12345", show_default=True,
              help="HOST:PORT of the segment store that owns every container (without --zk).")
@click.option("--zk", "zk_hosts", default="",
              help="ZooKeeper HOST:PORT[,...][/chroot]: run as one controller of a cluster (see docs/cluster.md).")
@click.option("--zk-root", default="/tributary", show_default=True, help="ZooKeeper path of Tributary's nodes.")
@click.option("--zk-session-timeout", default=10.0, show_default=True, type=click.FloatRange(1, 120),
              help="Seconds; a stopped controller's work is taken over this long after it stopped.")
@click.option("--rebalance-grace", default=2.0, show_default=True, type=click.FloatRange(0),
              help="Seconds a segment store may be gone before the leader moves its containers (with --zk).")
@click.option("--containers", "container_count", default=4, show_default=True, type=click.IntRange(1, 4096),
              help="Segment containers of the segment stores (must match them).")
@click.option("--wait", "wait_seconds", default=SEGMENT_STORE_WAIT_SECONDS, show_default=True,
              type=click.FloatRange(0), help="Seconds to keep trying to reach the segment store at start.")
@click.option("--log-level", default="warning", show_default=True, type=_LOG_LEVELS)
@_METRICS_PORT
@_REST_PORT
@_RETENTION_PERIOD
@click.option("--auto-scale/--no-auto-scale", "auto_scale", default=True, show_default=True,
              help="Act on the segment stores' load reports (split hot segments, merge cold ones).")
@_AUTO_SCALE_COLD_MARK
@_WATERMARK_PERIOD
@_TRANSACTION_LEASE_GRACE
@_security_options
@click.option("--token-key-file", type=click.Path(dir_okay=False, exists=True, path_type=pathlib.Path),
              default=None, help="The key delegation tokens are signed with (the segment stores' --token-key-file).")
@click.option("--tls-cert", type=click.Path(dir_okay=False, exists=True, path_type=pathlib.Path), default=None,
              help="Serve gRPC and REST over TLS with this certificate chain (PEM); needs --tls-key.")
@click.option("--tls-key", type=click.Path(dir_okay=False, exists=True, path_type=pathlib.Path), default=None,
              help="The private key (PEM) of --tls-cert.")
def controller(host, advertise_host, port, segment_store, zk_hosts, zk_root, zk_session_timeout, rebalance_grace,
               container_count, wait_seconds, log_level, metrics_port, rest_port, retention_period, auto_scale,
               auto_scale_cold_mark, watermark_period, transaction_lease_grace, password_file, token_ttl, tls_trust,
               token_key_file, tls_cert, tls_key) -> None:
    """Run one controller: against one segment store, or (--zk) as one of a cluster's."""
    logs.configure(log_level)
    advertised = _advertised(host, advertise_host)
    app_options = {"rest_port": rest_port,
                   "settings": _service_settings(retention_period, auto_scale, auto_scale_cold_mark, watermark_period),
                   "transaction_settings": _transaction_settings(transaction_lease_grace),
                   **_controller_security(password_file, token_key_file, token_ttl, tls_cert, tls_key, tls_trust)}
    if zk_hosts:
        _run_or_exit(_serve_clustered_controller(host, advertised, port, zk_hosts, zk_root, zk_session_timeout,
                                                 rebalance_grace, container_count, wait_seconds, metrics_port,
                                                 app_options))
    else:
        _run_or_exit(_serve_controller(host, advertised, port, _endpoint(segment_store), container_count,
                                       wait_seconds, metrics_port, app_options))


def _service_settings(retention_period: float, auto_scale: bool = True, auto_scale_cold_mark: float = 600.0,
                      watermark_period: float = 10.0):
    """The controller's service settings with the command line's retention and watermark periods and auto-scaling."""
    import dataclasses

    from controller.service.auto_scale_settings import AutoScaleSettings
    from controller.service.context import DEFAULT_SETTINGS

    return dataclasses.replace(DEFAULT_SETTINGS, retention_period_seconds=retention_period,
                               watermark_period_seconds=watermark_period,
                               auto_scale=AutoScaleSettings(enabled=auto_scale, cold_mark_seconds=auto_scale_cold_mark))


def _transaction_settings(lease_grace: float):
    """The controller's transaction settings with the command line's lease grace."""
    from controller.service.transactions import TransactionSettings

    return TransactionSettings(lease_grace_ms=round(lease_grace * 1000))


def _advertised(host: str, advertise_host: str | None) -> str:
    from server.config import WILDCARD_HOSTS

    if advertise_host:
        return advertise_host
    if host in WILDCARD_HOSTS:
        raise click.UsageError(f"listening on {host or 'every address'} needs --advertise-address "
                               "(the address clients use)")
    return host


@main.command()
@click.option("--zk", "zk_hosts", default=None, help="ZooKeeper HOST:PORT[,HOST:PORT][/chroot] of a cluster.")
@click.option("--zk-root", default="/tributary", show_default=True, help="ZooKeeper path of Tributary's nodes.")
@click.option("--health", "health", multiple=True, metavar="HOST:PORT",
              help="A process's operations port (--metrics-port): ask its /health/live and /health/ready (repeat).")
@click.option("--json", "as_json", is_flag=True, help="Print the answer as one JSON document.")
@click.option("--wait", "wait_seconds", default=0.0, type=click.FloatRange(0), metavar="SECONDS",
              help="With --zk: first wait up to this long until every container is served (a cluster that "
                   "was just started).")
@click.option("--stale-after", default=3.0, show_default=True, type=click.FloatRange(0, min_open=True),
              metavar="SECONDS",
              help="With --zk: a segment store whose heartbeat (its registration, rewritten every second or so) is "
                   "older than this is reported unknown, and its containers not served.")
def status(zk_hosts, zk_root, health, as_json, wait_seconds, stale_after) -> None:
    """Say what runs: a cluster's processes from ZooKeeper (--zk), or processes' health (--health).

    Exit status with --zk: 0 every container runs on its assigned segment store; 1 some container is
    not served (unassigned, its store gone or unknown, or still recovering); 2 ZooKeeper cannot be reached.
    With --health: 0 every process is ready; 1 one is live but not ready; 2 one cannot be reached.
    """
    if (zk_hosts is None) == (not health):
        raise click.UsageError("give either --zk (a cluster) or --health HOST:PORT (processes)")
    from .cluster_status import print_status
    from .health_status import print_health

    code: list[int] = []

    async def run() -> None:
        if health:
            code.append(await print_health(health, as_json, click.echo))
        else:
            code.append(await print_status(zk_hosts, zk_root, as_json, click.echo, wait_seconds, stale_after))

    _run(run())
    sys.exit(code[0] if code else 2)


@main.command()
@_segment_store_options
@click.option("--controller-port", default=9090, show_default=True, type=click.IntRange(0, 65535),
              help="Controller gRPC port (clients connect to tcp://HOST:PORT).")
@_REST_PORT
@_RETENTION_PERIOD
@_AUTO_SCALE_COLD_MARK
@_WATERMARK_PERIOD
@_TRANSACTION_LEASE_GRACE
@_security_options
def standalone(log_level, controller_port, metrics_port, rest_port, retention_period, auto_scale_cold_mark,
               watermark_period, transaction_lease_grace, password_file, token_ttl, tls_trust, **options) -> None:
    """Run the segment store and the controller in one process."""
    logs.configure(log_level)
    if options.get("cluster"):
        raise click.UsageError("standalone runs every container itself; --cluster is for `tributary segmentstore`")
    import os

    # One process: without a key file, the controller and the segment store share a random key.
    key = os.urandom(32).hex().encode() if password_file is not None and options["token_key_file"] is None else None
    config = _segment_store_config(**options, token_key=key)
    app_options = {"rest_port": rest_port,
                   "settings": _service_settings(retention_period, options["auto_scale"], auto_scale_cold_mark,
                                                 watermark_period),
                   "transaction_settings": _transaction_settings(transaction_lease_grace),
                   **_controller_security(password_file, options["token_key_file"], token_ttl, options["tls_cert"],
                                          options["tls_key"], tls_trust, token_key=key, trust_own_certificate=True)}
    _run_or_exit(_serve_standalone(config, controller_port, metrics_port, app_options))


@main.command()
@click.option("--controller", default="tcp://127.0.0.1:9090", show_default=True, help="Controller URI.")
@click.option("--scope", default="loadgen", show_default=True, help="Scope of the streams.")
@click.option("--stream", default="loadgen", show_default=True,
              help="Stream name (with --streams N > 1: STREAM-0 ... STREAM-(N-1)).")
@click.option("--streams", default=1, show_default=True, type=int, help="Streams to spread writers and readers over.")
@click.option("--segments", default=4, show_default=True, type=int,
              help="Fixed segments of each stream created (1-1000).")
@click.option("--create/--no-create", default=True, show_default=True,
              help="Create the scope and streams (existing ones are used as they are).")
@click.option("--writers", default=1, show_default=True, type=int, help="Writer tasks.")
@click.option("--readers", default=1, show_default=True, type=int,
              help="Reader tasks (one reader group per stream, from its tail; 0 or at least --streams).")
@click.option("--event-size", default=100, show_default=True, type=int,
              help="Bytes per event, header included (28 B to 8 MiB).")
@click.option("--rate", default="1000", show_default=True,
              help="Target events/s over all writers (0: as fast as possible); a comma-separated list "
                   "(1000,10000,50000) is a schedule: one step of --duration at each rate.")
@click.option("--duration", default=10.0, show_default=True, type=float,
              help="Seconds of writing (with a --rate schedule: of each step).")
@click.option("--keys", default=16, show_default=True, type=int,
              help="Routing keys, used round-robin (0: events without a key, so no order to check).")
@click.option("--transaction-size", default=0, show_default=True, type=int,
              help="Events per transaction, committed as they fill (0: no transactions).")
@click.option("--output", type=click.Path(dir_okay=False, path_type=pathlib.Path), default=None,
              help="Write the results as JSON to this file.")
@click.option("--drain-timeout", default=30.0, show_default=True, type=float,
              help="Seconds after writing stops for flushing and for readers to catch up.")
@click.option("--connect-timeout", default=10.0, show_default=True, type=float,
              help="Seconds to keep trying to reach the controller.")
@click.option("--progress/--no-progress", default=None,
              help="Live progress line (default: on a terminal) or a plain line every 5 s.")
@click.option("--quiet", is_flag=True, help="Print nothing but errors (results still go to --output).")
def loadgen(progress, quiet, rate, **options) -> None:
    """Generate load with writers and readers; report throughput, latency and a delivery check.

    Exit status: 0 ok, 1 could not run or ran with problems (errors, missing or duplicated
    events), 2 bad options, 130 interrupted (results are still printed and written).
    """
    from clients.loadgen import LoadOptions, OptionError, parse_rate, run_command

    try:
        load_options = LoadOptions(rate=parse_rate(rate), **options)
    except OptionError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(2)
    status = []

    async def run() -> None:
        status.append(await run_command(load_options, progress=progress, quiet=quiet, version=__version__))

    _run(run())
    sys.exit(status[0] if status else 1)


@main.command()
@click.argument("password_file", type=click.Path(dir_okay=False, path_type=pathlib.Path))
@click.argument("user")
@click.option("--acl", required=True,
              help='What the user may do: "prn::<resource pattern>,READ|READ_UPDATE;..." (docs/security.md).')
@click.option("--password-stdin", is_flag=True, help="Read the password from the first line of stdin.")
def passwd(password_file, user, acl, password_stdin) -> None:
    """Add USER to PASSWORD_FILE (or replace the user's line) with a hashed password and an ACL."""
    from controller.security import hash_password
    from wire.auth import Acl, InvalidAcl

    if not user or ":" in user:
        raise click.UsageError("a user name cannot be empty or contain ':'")
    try:
        parsed = Acl.parse(acl)
    except InvalidAcl as error:
        raise click.UsageError(str(error)) from None
    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = click.prompt("password", hide_input=True, confirmation_prompt=True)
    if not password:
        raise click.UsageError("the password cannot be empty")
    lines = password_file.read_text().splitlines() if password_file.exists() else []
    lines = [line for line in lines if not line.startswith(f"{user}:")]
    lines.append(f"{user}:{hash_password(password)}:{parsed.text()}")
    temporary = password_file.with_suffix(".tmp")
    temporary.write_text("\n".join(lines) + "\n")
    temporary.chmod(0o600)
    temporary.replace(password_file)
    click.echo(f"{user} written to {password_file}")


def _add_admin() -> None:
    from .admin import admin

    main.add_command(admin)


_add_admin()


# ---------------------------------------------------------------------- serving


async def _serve(part, metrics_port, host: str, process: str, banner: Callable[[], str]) -> None:
    """Runs ``part`` (a ``tributary.assembly`` object) until a signal, with its operations endpoint."""
    async with assembly.operations_endpoint(metrics_port, host, process, lambda: part.ready):
        await part.start()
        click.echo(banner(), err=True)
        await _until_signal()
        await part.stop()
    click.echo("stopped", err=True)


async def _serve_segment_store(config, metrics_port) -> None:
    store = assembly.SegmentStore(config, metrics=metrics_port is not None)
    await _serve(store, metrics_port, config.host, "segmentstore", lambda: (
        f"tributary {__version__}: segment store listening on {config.host}:{store.port} "
        f"(data dir {config.data_dir}, tier-1 {config.tier1}, tier-2 {config.tier2})"))


async def _serve_logstore(data_dir, host, port, advertise_host, zk_hosts, zk_root, gc_interval,
                          journal_file_size: int, metrics_port) -> None:
    log_store = assembly.LogStore(data_dir, zk_hosts, host=host, port=port, advertise_host=advertise_host,
                                  zk_root=zk_root, gc_interval=gc_interval, journal_file_size=journal_file_size)
    await _serve(log_store, metrics_port, host, "logstore", lambda: (
        f"tributary {__version__}: log store {log_store.service.replica_id} listening on {host}:"
        f"{log_store.service.port} (data dir {data_dir}, zookeeper {zk_hosts})"))


async def _serve_controller(host, advertised, port, segment_store, container_count, wait_seconds: float,
                            metrics_port, app_options: dict) -> None:
    controller = assembly.Controller(host, advertised, port, segment_store, container_count,
                                     wait_seconds=wait_seconds, app_options=app_options)
    await _serve(controller, metrics_port, host, "controller", lambda: (
        f"tributary {__version__}: controller listening on {host}:{controller.port}, "
        f"{_clients_use(controller.app, advertised)} (segment store {segment_store[0]}:{segment_store[1]})"))


async def _serve_clustered_controller(host, advertised, port, zk_hosts, zk_root, session_timeout, grace,
                                      container_count, wait_seconds: float, metrics_port, app_options: dict) -> None:
    controller = assembly.ClusteredController(host, advertised, port, zk_hosts, zk_root, session_timeout, grace,
                                              container_count, wait_seconds=wait_seconds,
                                              metrics=metrics_port is not None, app_options=app_options)

    def banner() -> str:
        app = controller.app
        assert app is not None and app.cluster is not None, "serving"
        return (f"tributary {__version__}: controller {app.cluster.controller_id} listening on {host}:{app.port}, "
                f"{_clients_use(app, advertised)} (cluster at {zk_hosts}{zk_root})")

    await _serve(controller, metrics_port, host, "controller", banner)


async def _serve_standalone(config, controller_port, metrics_port, app_options: dict) -> None:
    standalone = assembly.Standalone(config, controller_port, metrics=metrics_port is not None,
                                     app_options=app_options)

    def banner() -> str:
        store, controller = standalone.store, standalone.controller
        assert store is not None and controller is not None, "serving"
        return (f"tributary {__version__}: standalone: {_clients_use(controller.app, config.advertised_host)} "
                f"(controller listening on {config.host}:{controller.port}, segment store on {config.host}:"
                f"{store.port}; data dir {config.data_dir}, tier-2 {config.tier2})")

    await _serve(standalone, metrics_port, config.host, "standalone", banner)


def _clients_use(app, advertised: str) -> str:
    """What a client must be given: the controller URI (tls:// with TLS on) at the advertised address, and the
    REST API's URL if it is served."""
    host = f"[{advertised}]" if ":" in advertised else advertised
    text = f"clients use {'tls' if app.tls is not None else 'tcp'}://{host}:{app.port}"
    if app.rest_port is not None:
        text += f", REST API and console at {'https' if app.tls is not None else 'http'}://{host}:{app.rest_port}"
    return text


async def _until_signal() -> None:
    """Serves until SIGTERM or SIGINT. What startup made (modules, recovered state) is frozen out of the
    cyclic collector first: it is not garbage, and a full collection scanning it again stalled the event
    loop for ~9 ms here (gc.freeze; objects made later are collected as usual). The signal handlers come
    first: a SIGTERM sent as soon as the banner is out must stop the server cleanly, not kill it."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signal_number, stop.set)
    gc.collect()
    gc.freeze()
    await stop.wait()


def _run_or_exit(coroutine) -> None:
    try:
        _run(coroutine)
    except assembly.StartupFailed as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)


def _run(coroutine) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; fall back for odd platforms
        asyncio.run(coroutine)
        return
    uvloop.run(coroutine)


if __name__ == "__main__":
    main()
