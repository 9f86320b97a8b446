"""History that only Tier-2 holds is read back after a restart, over plaintext and over TLS, by both clients.

Scenario (issue 24, defect 1): a standalone (TLS on or off) with age checkpoints every half second gets
30 events from Tributary's SDK and 30 from the real ``pravega`` client, one stream each. Once Tier-2 holds
them (flush lag 0) and the checkpoints after them let Tier-1 be truncated, the standalone is stopped with
SIGTERM and started again on the same data dir. Then the SDK (a batch read and a reader group) and the real
client (a reader group) each read both streams: every event once, in per-key order.

After the restart those bytes come from Tier-2 chunk files, the path that sends file regions with
``sendfile``; over TLS that path once wrote plaintext past the encryption (the SDK failed with
``WRONG_VERSION_NUMBER``, reader groups silently read nothing). The test checks that the reads did come
from Tier-2 (the store's ``tributary_tier2_read_bytes`` counter covers both streams), so it cannot pass
by reading the cache instead.
"""

from __future__ import annotations

import asyncio
import time

import pytest

import tributary
from clients.config import ClientConfig
from clients.model import ScalingPolicy, StreamConfiguration
from tests.support.certs import make_certificates
from tests.support.metrics import scrape, value
from tests.support.pravega_driver import check_each_once_in_key_order, run_scenario
from tests.support.pravega_scenarios import event_text
from tests.support.processes import free_port
from tests.support.standalone import StandaloneProcess

pytestmark = [pytest.mark.timeout(240), pytest.mark.process]

SCOPE = "history"
COUNT, KEYS = 30, 3
EVENT_HEADER = 8  # each event's length prefix in the segment
CHECKPOINT_SECONDS = 0.5


async def sdk_write(uri: str, config: ClientConfig) -> None:
    async with tributary.connect(uri, config) as client:
        await client.create_scope(SCOPE)
        await client.create_stream(SCOPE, "sdk", StreamConfiguration(ScalingPolicy.fixed(2)))
        async with client.create_writer(SCOPE, "sdk") as writer:
            for number in range(COUNT):
                await writer.write(event_text(number % KEYS, number // KEYS).encode(), f"key-{number % KEYS}")
            await writer.flush()


async def sdk_read(uri: str, config: ClientConfig, stream: str) -> tuple[list[str], list[str]]:
    """(the events of a batch read, those of a reader group) of ``stream``."""
    async with tributary.connect(uri, config) as client:
        batch = client.create_batch_client()
        batched = [payload.decode() for piece in await batch.slices(SCOPE, stream)
                   async for chunk in batch.read(piece) for payload in chunk.payloads]
        group = await client.create_reader_group(SCOPE, f"sdk-{stream}", [stream])
        grouped: list[str] = []
        async with group.create_reader("reader") as reader:
            while len(grouped) < COUNT:
                event = await reader.read_next(20)
                assert event is not None, f"the SDK's reader group read {len(grouped)} of {COUNT} events of {stream}"
                grouped.append(event.data.decode())
        return batched, grouped


def wait_until_flushed(metrics_port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while value(scrape(metrics_port), "tributary_tier2_flush_lag_bytes") > 0:
        assert time.monotonic() < deadline, "Tier-2 did not catch up"
        time.sleep(0.1)


def stream_bytes() -> int:
    return sum(EVENT_HEADER + len(event_text(number % KEYS, number // KEYS)) for number in range(COUNT))


@pytest.mark.parametrize("transport", ["plaintext", "tls"])
def test_history_in_tier2_is_read_after_a_restart_by_both_clients(tmp_path, transport):
    tls = transport == "tls"
    certificates = make_certificates(tmp_path / "certs")
    metrics_port = free_port()
    arguments = ["--checkpoint-interval", str(CHECKPOINT_SECONDS), "--advertise-address", "localhost",
                 "--metrics-port", str(metrics_port)]
    if tls:
        arguments += ["--tls-cert", str(certificates.certificate), "--tls-key", str(certificates.key),
                      "--tls-trust", str(certificates.ca)]
    standalone = StandaloneProcess(tmp_path / "data", log_path=tmp_path / "standalone.log",
                                   extra_args=arguments).start(timeout=60)
    uri = f"{'tls' if tls else 'tcp'}://localhost:{standalone.controller_port}"
    config = ClientConfig(tls_trust=str(certificates.ca)) if tls else ClientConfig()
    environment = {"pravega_client_tls_cert_path": str(certificates.ca)} if tls else {}
    try:
        asyncio.run(sdk_write(uri, config))
        written = run_scenario("write", uri, {"scope": SCOPE, "stream": "rust", "count": COUNT, "keys": KEYS,
                                              "segments": 2, "create": True},
                               tmp_path / "rust-write.log", environment=environment)
        assert written["written"] == COUNT

        wait_until_flushed(metrics_port)
        time.sleep(6 * CHECKPOINT_SECONDS)  # age checkpoints follow the flush; the log is truncated before them
        assert standalone.terminate() == 0
        standalone.start(timeout=60)

        for stream in ("sdk", "rust"):
            batched, grouped = asyncio.run(sdk_read(uri, config, stream))
            check_each_once_in_key_order(batched, COUNT, KEYS)
            check_each_once_in_key_order(grouped, COUNT, KEYS)
            result = run_scenario("read", uri, {"scope": SCOPE, "stream": stream, "group": f"rust-{stream}",
                                                "expected": COUNT, "timeout": 60},
                                  tmp_path / f"rust-read-{stream}.log", environment=environment)
            check_each_once_in_key_order([event for reader in result["received"] for event in reader], COUNT, KEYS)
        # The reads were served from Tier-2, not from a cache that a replayed Tier-1 log had filled.
        assert value(scrape(metrics_port), "tributary_tier2_read_bytes_total") >= 2 * stream_bytes()
    finally:
        standalone.remove_data()
