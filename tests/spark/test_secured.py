"""format ``tributary`` against a server with passwords, delegation tokens and TLS (docs/spark.md "Secured
servers"): batch write and read and a streaming copy with the password in a file and the test CA trusted,
exactly once; the password from an environment variable Spark gives its workers; a secret given inline
stays out of the query plan; a wrong password or a missing file fails the query with a clear error."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

import tributary
from clients.config import ClientConfig
from clients.model import ScalingPolicy, StreamConfiguration
from tests.spark.support import number_of
from tests.support.sdk import write_keyed
from tests.support.secured import start_secured_standalone

pytestmark = [pytest.mark.spark, pytest.mark.process, pytest.mark.slow]

USER, PASSWORD = "spark", "spark-Pa55word"
USERS = {USER: (PASSWORD, "prn::*,READ_UPDATE")}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    home = tmp_path_factory.mktemp("spark-secured")
    standalone, certificates, _ = start_secured_standalone(home, USERS)
    password_file = home / "spark.password"
    password_file.write_text(PASSWORD + "\n")
    yield {"controller": f"tls://localhost:{standalone.controller_port}", "trust_store": str(certificates.ca),
           "password_file": str(password_file)}
    standalone.remove_data()


def sdk_config(secured) -> ClientConfig:
    return ClientConfig(credentials=(USER, PASSWORD), tls_trust=secured["trust_store"])


def prepare(secured, scope: str, count: int) -> None:
    async def write():
        async with tributary.connect(secured["controller"], sdk_config(secured)) as client:
            await client.create_scope(scope)
            await client.create_stream(scope, "in", StreamConfiguration(ScalingPolicy.fixed(2)))
            async with client.create_writer(scope, "in") as writer:
                await write_keyed(writer, count, keys=16)
    asyncio.run(write())


def numbers(secured, scope: str, stream: str) -> list[int]:
    async def read():
        async with tributary.connect(secured["controller"], sdk_config(secured)) as client:
            batch = client.create_batch_client()
            return [payload for piece in await batch.slices(scope, stream)
                    async for chunk in batch.read(piece) for payload in chunk.payloads]
    return sorted(number_of(payload) for payload in asyncio.run(read()))


def access(secured, **overrides) -> dict[str, str]:
    options = {"controller": secured["controller"], "trust_store": secured["trust_store"], "username": USER,
               "password_file": secured["password_file"]}
    options.update(overrides)
    return {name: value for name, value in options.items() if value is not None}


def test_batch_and_streaming_over_tls_with_a_password_file_exactly_once(spark, secured, scope_name, tmp_path):
    prepare(secured, scope_name, 3000)
    frame = spark.read.format("tributary").options(**access(secured), scope=scope_name, stream="in").load()
    assert sorted(number_of(row.event) for row in frame.select("event").collect()) == list(range(3000))
    frame.select("event").write.format("tributary").options(**access(secured), scope=scope_name,
                                                            stream="copy").mode("append").save()
    assert numbers(secured, scope_name, "copy") == list(range(3000))
    for _ in range(2):  # a streaming copy, run again from its checkpoint: nothing twice
        query = (spark.readStream.format("tributary").options(**access(secured), scope=scope_name, stream="in",
                                                              start_stream_cut="earliest").load()
                 .select("event").writeStream.format("tributary")
                 .options(**access(secured), scope=scope_name, stream="streamed")
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
        query.awaitTermination(180)
        assert query.exception() is None
    assert numbers(secured, scope_name, "streamed") == list(range(3000))


def test_an_inline_password_works_and_stays_out_of_the_plan(spark, secured, scope_name):
    prepare(secured, scope_name, 100)
    frame = spark.read.format("tributary").options(**access(secured, password_file=None, password=PASSWORD),
                                                   scope=scope_name, stream="in").load()
    assert frame.count() == 100
    plan = frame._jdf.queryExecution().toString()
    assert "tributary" in plan.lower() and PASSWORD not in plan


@pytest.mark.parametrize("overrides, message", [
    ({"password_file": None, "password": "wrong-password"}, "auth"),
    ({"password_file": "/nonexistent/spark.password"}, "option password_file: cannot read /nonexistent/spark.password"),
])
def test_a_wrong_or_missing_password_fails_the_query_clearly(spark, secured, scope_name, overrides, message):
    prepare(secured, scope_name, 10)
    reader = spark.read.format("tributary").options(**access(secured, **overrides), scope=scope_name, stream="in")
    with pytest.raises(Exception, match=f"(?i){message}") as raised:
        reader.load().count()
    assert "wrong-password" not in str(raised.value)


def test_the_password_from_an_environment_variable_spark_gives_its_workers(secured, scope_name):
    prepare(secured, scope_name, 500)
    variable = "TRIBUTARY_SPARK_TEST_PASSWORD"
    environment = {name: value for name, value in os.environ.items() if name != variable}
    result = subprocess.run([sys.executable, "-m", "tests.spark.secured_driver", secured["controller"],
                             secured["trust_store"], scope_name, "in", USER, variable, PASSWORD],
                            capture_output=True, text=True, timeout=240, env=environment)
    assert result.returncode == 0 and "events: 500" in result.stdout, result.stdout + result.stderr[-3000:]
