"""A gRPC fuzz of the controller: `tributary standalone` as a child process gets random bytes,
random well-typed messages and mutated ones on every ControllerService RPC for FUZZ_SECONDS
(random with fixed seeds, 16 concurrent callers). Then:

* no reply is INTERNAL or UNKNOWN, except INTERNAL for the stream states Java answers with it
  (a stream still being created, or sealed: spec §1.4, §4.3, §4.5), which depend on what the
  fuzz did to a stream before, not on the request, and which the Rust client retries;
* every request the client-side copy of the boundary refuses (undecodable bytes, or
  ``api_validation.validate`` saying no) got exactly that refusal: the INVALID_ARGUMENT code or
  the RPC's own status reply;
* the controller wrote a bounded number of log lines (no traceback per request, one summary line
  per interval for the refused ones) and no error-level line;
* the process is still up, the real pravega client creates a scope and a stream and writes and
  reads events, and the process stops cleanly on SIGTERM.
"""

from __future__ import annotations

import asyncio
import collections
import json
import math
import random
import re
import time

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor

from controller_api import controller_pb2 as pb
from controller.api_validation import validate
from tests.support.pravega_driver import check_each_once_in_key_order, run_scenario
from tests.support.standalone import StandaloneProcess

pytestmark = [pytest.mark.interop, pytest.mark.process]

SERVICE = pb.DESCRIPTOR.services_by_name["ControllerService"]
FUZZ_SECONDS = 18.0
CALLERS = 16
CALL_TIMEOUT_SECONDS = 5.0
SEED = 20261124
SCOPE, STREAMS = "fz", ("s", "t")
LOG_LINES_MAX = 60
SUMMARY_INTERVAL_SECONDS = 10.0  # bad_requests.INTERVAL_SECONDS_DEFAULT

VALID_NAMES = ["fz", "s", "t", "g", "_system", "_MARKs", "sc.1-2", "fz/g"]
BAD_NAMES = ["", "a/b", "bad name", "x" * 256, "x" * 9000, "é", "\x00", "_", "fz/", "00", "deadbeef", "ff" * 40,
             "00000000-0000-0000-0000-000000000000", "1"]
INTEGERS = [0, 1, 2, 3, -1, 2**31 - 1, -2**31, 2**32, 2**63 - 1, -2**63, 4294967297, 1 << 32 | 1 << 31]
DOUBLES = [0.0, 1.0, 0.5, -0.0, -1.0, 2.0, math.nan, math.inf, -math.inf, 1e-300, 0.9999999999999999, 0.25, 0.75]
# Java answers these stream states with INTERNAL (Rust retries them): a create not finished, or sealed
STATE_ANSWERS = re.compile(r"\bis (being created|CREATING|SEALING|SEALED|sealed|sealing)\b")
ALLOWED_CODES = {"OK", "INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "FAILED_PRECONDITION",
                 "DEADLINE_EXCEEDED"}


# ---------------------------------------------------------------------- request generation


def _wrap(value: int, bits: int) -> int:
    return ((value + 2 ** (bits - 1)) % 2**bits) - 2 ** (bits - 1)


def _scalar(rng: random.Random, field):
    kind = field.type
    if kind in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64):
        bits = 32 if kind == FieldDescriptor.TYPE_INT32 else 64
        return _wrap(rng.choice(INTEGERS) if rng.random() < 0.7 else rng.getrandbits(bits), bits)
    if kind == FieldDescriptor.TYPE_DOUBLE:
        return rng.choice(DOUBLES) if rng.random() < 0.7 else rng.uniform(-2.0, 2.0)
    if kind == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if kind == FieldDescriptor.TYPE_STRING:
        roll = rng.random()
        if roll < 0.45:
            return rng.choice(VALID_NAMES)
        if roll < 0.9:
            return rng.choice(BAD_NAMES)
        return "".join(chr(rng.randint(1, 0x2FF)) for _ in range(rng.randint(0, 20)))
    if kind == FieldDescriptor.TYPE_ENUM:
        return rng.choice([value.number for value in field.enum_type.values] + [-1, 99, 2**31 - 1])
    raise AssertionError(f"no generator for field type {kind}")


def fill(rng: random.Random, message, depth: int = 0):
    """``message`` with random fields set; a StreamInfo names the fuzz's own streams half the time."""
    if message.DESCRIPTOR.name == "StreamInfo" and rng.random() < 0.5:
        message.scope, message.stream = SCOPE, rng.choice(STREAMS)
        return message
    for field in message.DESCRIPTOR.fields:
        if rng.random() < 0.25:
            continue
        target = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
            for _ in range(rng.randint(0, 4)):
                if value.message_type is not None:
                    fill(rng, target[_scalar(rng, key)], depth + 1)
                else:
                    target[_scalar(rng, key)] = _scalar(rng, value)
        elif field.is_repeated:
            for _ in range(rng.randint(0, 4)):
                if field.message_type is None:
                    target.append(_scalar(rng, field))
                elif depth < 4:
                    fill(rng, target.add(), depth + 1)
        elif field.message_type is not None:
            if depth < 4:
                fill(rng, target, depth + 1)
                target.SetInParent()
        else:
            setattr(message, field.name, _scalar(rng, field))
    return message


def mutate(rng: random.Random, data: bytes) -> bytes:
    """1-4 of: flip a bit, delete bytes, insert random bytes, truncate, overwrite with an edge byte."""
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        operation = rng.randrange(5)
        if operation == 2 or not data:
            at = rng.randint(0, len(data))
            data[at:at] = rng.randbytes(rng.randint(1, 8))
            continue
        at = rng.randrange(len(data))
        if operation == 0:
            data[at] ^= 1 << rng.randrange(8)
        elif operation == 1:
            del data[at:at + rng.randint(1, 8)]
        elif operation == 3:
            del data[at:]
        else:
            data[at] = rng.choice([0x00, 0x7F, 0x80, 0xFF])
    return bytes(data)


def request_bytes(rng: random.Random, method) -> tuple[str, bytes]:
    kind = rng.choice(["random", "typed", "mutated"])
    if kind == "random":
        return kind, rng.randbytes(rng.randint(0, 64))
    data = fill(rng, getattr(pb, method.input_type.name)()).SerializeToString()
    return kind, (data if kind == "typed" else mutate(rng, data))


def expected_refusal(method, data: bytes):
    """What the boundary must answer, computed here: "INVALID_ARGUMENT", a reply message, or None
    (the request goes to the services)."""
    try:
        request = getattr(pb, method.input_type.name).FromString(data)
    except Exception:  # noqa: BLE001 - undecodable, whatever the protobuf error
        return "INVALID_ARGUMENT"
    rejection = validate(method.name, request)
    if rejection is None:
        return None
    return rejection.code.name if rejection.reply is None else rejection.reply


# ---------------------------------------------------------------------- the fuzz


class Tally:
    def __init__(self):
        self.codes: collections.Counter[str] = collections.Counter()
        self.kinds: collections.Counter[str] = collections.Counter()
        self.refused = 0
        self.state_internal: collections.Counter[str] = collections.Counter()
        self.unexpected: list[str] = []  # INTERNAL/UNKNOWN/other codes, and refusals answered wrongly

    def problem(self, text: str) -> None:
        if len(self.unexpected) < 50:
            self.unexpected.append(text)
        else:
            self.unexpected[-1] = f"... and more ({text})"


async def fuzz(port: int, seconds: float) -> Tally:
    tally = Tally()
    methods = list(SERVICE.methods)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        calls = {method.name: channel.unary_unary(f"/{SERVICE.full_name}/{method.name}") for method in methods}
        deadline = time.monotonic() + seconds

        async def caller(number: int) -> None:
            rng = random.Random(SEED * 100 + number)
            while time.monotonic() < deadline:
                method = rng.choice(methods)
                kind, data = request_bytes(rng, method)
                expected = expected_refusal(method, data)
                tally.kinds[kind] += 1
                try:
                    reply, code, details = await calls[method.name](data, timeout=CALL_TIMEOUT_SECONDS), "OK", ""
                except grpc.aio.AioRpcError as error:
                    reply, code, details = None, error.code().name, error.details() or ""
                tally.codes[code] += 1
                what = f"{method.name} ({kind}, {len(data)} bytes) -> {code} {details[:100]!r}"
                if expected is not None:
                    tally.refused += 1
                    if isinstance(expected, str):
                        if code != expected:
                            tally.problem(f"{what}, expected {expected}")
                    elif code != "OK" or getattr(pb, method.output_type.name).FromString(reply) != expected:
                        tally.problem(f"{what}, expected the reply {expected}")
                elif code == "INTERNAL" and STATE_ANSWERS.search(details):
                    tally.state_internal[method.name] += 1
                elif code not in ALLOWED_CODES:
                    tally.problem(what)

        await asyncio.gather(*(caller(number) for number in range(CALLERS)))
    return tally


def log_entries(path) -> tuple[list[str], list[dict]]:
    lines = path.read_text(errors="replace").splitlines()
    entries = []
    for line in lines:
        try:
            entries.append(json.loads(line))
        except ValueError:
            entries.append({"level": "raw", "msg": line})
    return lines, entries


@pytest.mark.slow
def test_fuzzed_requests_are_refused_quietly_and_the_controller_keeps_working(tmp_path):
    log_path = tmp_path / "standalone.log"
    standalone = StandaloneProcess(tmp_path / "data", log_path=log_path).start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{standalone.controller_port}") as channel:
            create_scope = channel.unary_unary(f"/{SERVICE.full_name}/createScope",
                                               request_serializer=pb.ScopeInfo.SerializeToString,
                                               response_deserializer=pb.CreateScopeStatus.FromString)
            create_stream = channel.unary_unary(f"/{SERVICE.full_name}/createStream",
                                                request_serializer=pb.StreamConfig.SerializeToString,
                                                response_deserializer=pb.CreateStreamStatus.FromString)
            assert create_scope(pb.ScopeInfo(scope=SCOPE), timeout=10).status == pb.CreateScopeStatus.SUCCESS
            for stream in STREAMS:
                reply = create_stream(pb.StreamConfig(streamInfo=pb.StreamInfo(scope=SCOPE, stream=stream),
                                                      scalingPolicy=pb.ScalingPolicy(minNumSegments=2)), timeout=10)
                assert reply.status == pb.CreateStreamStatus.SUCCESS
        lines_before = len(log_path.read_text(errors="replace").splitlines())

        started = time.monotonic()
        tally = asyncio.run(fuzz(standalone.controller_port, FUZZ_SECONDS))
        elapsed = time.monotonic() - started
        time.sleep(0.5)  # let the last log lines reach the file
        lines, entries = log_entries(log_path)
        fuzz_entries = entries[lines_before:]
        summaries = [entry for entry in fuzz_entries if "bad controller request" in entry.get("msg", "")]
        sent = sum(tally.codes.values())
        print(f"\nfuzz: {sent} calls in {elapsed:.1f} s ({dict(tally.kinds)}); replies {dict(tally.codes)}; "
              f"{tally.refused} refused at the boundary; state INTERNAL {dict(tally.state_internal)}; "
              f"{len(fuzz_entries)} controller log lines during the fuzz ({len(summaries)} bad-request summaries), "
              f"{len(lines)} in all")

        assert sent > 1000 and tally.refused > sent // 4, (sent, tally.refused)
        assert not tally.unexpected, "\n".join(tally.unexpected)
        assert tally.codes["UNKNOWN"] == 0
        assert sum(tally.state_internal.values()) <= sent // 100, tally.state_internal
        assert len(fuzz_entries) <= LOG_LINES_MAX, "\n".join(lines[lines_before:][:80])
        assert len(summaries) <= elapsed / SUMMARY_INTERVAL_SECONDS + 2, summaries
        assert not [entry for entry in fuzz_entries if entry.get("level") in ("error", "critical")
                    or "exception" in entry], "\n".join(lines[lines_before:][:80])
        assert standalone.process.poll() is None, "the standalone died during the fuzz"

        result = run_scenario("write_and_read", standalone.controller_uri,
                              {"scope": "after-fuzz", "stream": "events", "create": True, "segments": 2,
                               "count": 40, "keys": 4, "timeout": 60}, tmp_path / "client.out", timeout=180)
        check_each_once_in_key_order(result["received"][0], 40, 4)
        assert standalone.terminate() == 0
    finally:
        standalone.remove_data()
