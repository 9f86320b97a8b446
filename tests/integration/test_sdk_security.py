"""The asyncio SDK against a standalone with a password file, delegation tokens and TLS (docs/security.md,
docs/sdk.md "Security"): with credentials and the CA it writes (events, transactions, large events, byte
streams), reads (reader groups, batch), and uses key-value tables over TLS, through tokens that expire
(10 s) and are renewed under it; wrong credentials, too little permission and an untrusted certificate
fail with the documented errors.
"""

from __future__ import annotations

import asyncio
import pathlib

import pytest

import tributary
from clients.config import ClientConfig
from clients.kvt import KeyValueTableConfiguration, TableKey
from clients.model import ScalingPolicy, StreamConfiguration
from tests.support.doc_blocks import fenced_blocks
from tests.support.docs_runner import commands, words
from tests.support.secured import start_secured_standalone
from coordination.retry import Backoff

pytestmark = pytest.mark.process

TOKEN_TTL = 10  # the shortest the controller takes: renewals and expiries happen within the test
USERS = {"admin": ("admin-password", "prn::*,READ_UPDATE"),
         "viewer": ("viewer-password",
                    "prn::/scope:sdk-sec,READ;prn::/scope:sdk-sec/stream:*,READ;"
                    "prn::/scope:sdk-sec/reader-group:*,READ_UPDATE"),
         "one-stream": ("one-stream-password",  # may read sdk-sec/watched only
                        "prn::/scope:sdk-sec,READ;prn::/scope:sdk-sec/stream:watched,READ;"
                        "prn::/scope:sdk-sec/reader-group:*,READ_UPDATE")}
DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "security.md"


def documented_acl(user: str) -> str:
    """The ACL docs/security.md gives ``user`` in its ``tributary passwd users USER --acl ACL`` command."""
    for block in fenced_blocks(DOCS):
        for command in commands(block.code) if block.language == "shell" else []:
            argv = words(command)
            if argv[:4] == ["tributary", "passwd", "users", user]:
                return argv[argv.index("--acl") + 1]
    raise AssertionError(f"{DOCS} gives no ACL for {user}")


USERS["analyst"] = ("analyst-password", documented_acl("analyst"))
SHORT = Backoff(initial_seconds=0.05, multiplier=2.0, max_delay_seconds=0.5, attempts=None, total_seconds=3.0)


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    standalone, certificates, _ = start_secured_standalone(tmp_path_factory.mktemp("sdk-secured"), USERS,
                                                           ["--token-ttl", str(TOKEN_TTL)])
    yield {"uri": f"tls://localhost:{standalone.controller_port}", "ca": str(certificates.ca)}
    standalone.remove_data()


def config(secured, user: str, password: str | None = None, **settings) -> ClientConfig:
    return ClientConfig(credentials=(user, USERS[user][0] if password is None else password),
                        tls_trust=secured["ca"], **settings)


async def test_everything_works_over_tls_with_tokens_that_expire_under_it(secured):
    async with tributary.connect(secured["uri"], config(secured, "admin")) as client:
        await client.create_scope("sdk-sec")
        await client.create_stream("sdk-sec", "events", StreamConfiguration(ScalingPolicy.fixed(2)))
        await client.create_stream("sdk-sec", "bytes")
        group = await client.create_reader_group("sdk-sec", "all", ["events"])
        async with client.create_writer("sdk-sec", "events") as writer, \
                group.create_reader("r1") as reader:
            for n in range(10):
                await writer.write(b"first %d" % n, routing_key=str(n))
            await writer.flush()
            first = {(await reader.read_next(10)).data for _ in range(10)}
            assert first == {b"first %d" % n for n in range(10)}

            await asyncio.sleep(TOKEN_TTL + 2)  # every token the client holds has expired by now

            async with client.create_transactional_writer("sdk-sec", "events") as transactional:
                async with await transactional.begin() as txn:
                    await txn.write(b"in a transaction", routing_key="t")
            await writer.write_large_event(b"L" * (9 * 1024 * 1024), "big")
            await writer.write(b"after", routing_key="0")
            await writer.flush()
            later = []
            while len(later) < 3:
                event = await reader.read_next(20)
                assert event is not None, f"only {len(later)} events read after the tokens expired"
                later.append(event.data)
            assert sorted(later, key=len) == [b"after", b"in a transaction", b"L" * (9 * 1024 * 1024)]

        async with client.create_byte_writer("sdk-sec", "bytes") as bytes_writer:
            await bytes_writer.write(b"hello tls")
            await bytes_writer.flush()
        async with client.create_byte_reader("sdk-sec", "bytes") as bytes_reader:
            assert await bytes_reader.read(9) == b"hello tls"

        batch = client.create_batch_client()
        slices = await batch.slices("sdk-sec", "events")
        payloads = [payload for piece in slices async for chunk in batch.read(piece) for payload in chunk.payloads]
        assert len(payloads) == 13 and b"in a transaction" in payloads

        assert await client.create_key_value_table("sdk-sec", "table", KeyValueTableConfiguration(2, 4))
        table = await client.key_value_table("sdk-sec", "table")
        await table.put(TableKey(b"key1"), b"value")
        assert (await table.get(TableKey(b"key1"))).value == b"value"


async def test_wrong_password_is_refused(secured):
    async with tributary.connect(secured["uri"], config(secured, "admin", "wrong")) as client:
        with pytest.raises(tributary.AuthenticationFailed):
            await client.create_scope("nope")


async def test_without_credentials_the_controller_refuses(secured):
    async with tributary.connect(secured["uri"], ClientConfig(tls_trust=secured["ca"])) as client:
        with pytest.raises(tributary.AuthenticationFailed):
            await client.scope_exists("sdk-sec")


async def written_by_admin(secured, scope: str, stream: str, event: bytes) -> None:
    async with tributary.connect(secured["uri"], config(secured, "admin")) as admin:
        await admin.create_scope(scope)
        await admin.create_stream(scope, stream)
        async with admin.create_writer(scope, stream) as writer:
            await writer.write(event)


async def check_reads_with_a_group_but_cannot_write(client, scope: str, stream: str, group_name: str,
                                                    event: bytes) -> None:
    group = await client.create_reader_group(scope, group_name, [stream])
    async with group.create_reader("r1") as reader:
        assert (await reader.read_next(10)).data == event
    async with client.create_writer(scope, stream) as writer:
        with pytest.raises(tributary.TokenRejected):
            await writer.write(b"forbidden")
            await writer.flush()


async def test_a_reader_may_read_but_not_write(secured):
    await written_by_admin(secured, "sdk-sec", "readonly", b"visible")
    async with tributary.connect(secured["uri"], config(secured, "viewer")) as client:
        with pytest.raises(tributary.PermissionDenied):
            await client.create_stream("sdk-sec", "mine")
        await check_reads_with_a_group_but_cannot_write(client, "sdk-sec", "readonly", "viewers", b"visible")
        with pytest.raises(tributary.PermissionDenied):
            await client.create_scope("elsewhere")


async def test_a_reader_of_one_stream_may_read_its_watermarks(secured):
    """The mark stream _MARK<stream> is authorised as its stream: its time window is readable."""
    async with tributary.connect(secured["uri"], config(secured, "admin")) as admin:
        await admin.create_scope("sdk-sec")
        await admin.create_stream("sdk-sec", "watched")
        async with admin.create_writer("sdk-sec", "watched") as writer:
            await writer.write(b"timed")
            await writer.flush()
            await writer.note_time(1_000)
    async with tributary.connect(secured["uri"], config(secured, "one-stream")) as client:
        group = await client.create_reader_group("sdk-sec", "watchers", ["watched"])
        async with group.create_reader("w1") as reader:
            assert (await reader.read_next(10)).data == b"timed"
            window = await reader.current_time_window("sdk-sec", "watched")
            assert window.lower_time_bound is None or window.lower_time_bound <= 1_000


async def test_a_server_certificate_the_client_does_not_trust_is_refused(secured):
    untrusted = ClientConfig(credentials=("admin", USERS["admin"][0]), controller_retry=SHORT)
    async with tributary.connect(secured["uri"], untrusted) as client:
        with pytest.raises(tributary.ControllerUnavailable):
            await client.scope_exists("sdk-sec")


async def test_the_documented_analyst_reads_with_a_reader_group_and_cannot_write(secured):
    """docs/security.md's analyst ACL (READ on the scope and its streams) lets the analyst run a reader group, as
    Pravega's ACLs do (the group's state needs READ_UPDATE on the reader group); writing stays refused."""
    await written_by_admin(secured, "sensors", "readings", b"21.5")
    async with tributary.connect(secured["uri"], config(secured, "analyst")) as client:
        await check_reads_with_a_group_but_cannot_write(client, "sensors", "readings", "dashboard", b"21.5")
