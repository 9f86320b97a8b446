"""Authentication, authorization, delegation tokens and TLS against a real standalone (docs/security.md):
users from a password file, TLS on the wire, gRPC and REST listeners.

* gRPC: no credentials or a wrong password -> UNAUTHENTICATED; a user without the permission ->
  PERMISSION_DENIED; listings show only what the caller may read; the delegation token grants exactly
  the caller's permission on the stream.
* Wire port: a request without a token, with a forged one, an expired one (code 1, so clients fetch a new
  one), or one for another stream or with too little permission -> AuthTokenCheckFailed; the right token
  is served.
* REST: 401 with WWW-Authenticate without credentials, 403 without permission, listings filtered; the same
  through `tributary admin --user --password-stdin --tls-trust`.
* The real pravega client with TLS and credentials writes and reads; with a wrong password it gets nothing.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import grpc
import pytest

from clients.connection import WireConnection, next_request_id
from controller_api import controller_pb2 as pb
from controller_api import controller_pb2_grpc as pb_grpc
from tests.support.processes import free_port
from tests.support.secured import start_secured_standalone
from wire import auth
from wire import commands as c
from wire.auth import Acl, Permission

pytestmark = pytest.mark.process

USERS = {"admin": ("admin-password", "prn::*,READ_UPDATE"),
         "reader": ("reader-password", "prn::/scope:open,READ;prn::/scope:open/*,READ"),
         "writer": ("writer-password", "prn::/scope:open,READ;prn::/scope:open/*,READ_UPDATE")}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    rest_port = free_port()
    standalone, certificates, key_file = start_secured_standalone(tmp_path_factory.mktemp("secured"), USERS,
                                                                  ["--rest-port", str(rest_port)])
    context = ssl.create_default_context(cafile=str(certificates.ca))
    yield {"standalone": standalone, "ca": certificates.ca, "key": key_file.read_bytes(), "rest": rest_port,
           "ssl": context}
    standalone.remove_data()


def credentials(user: str, password: str | None = None) -> tuple[tuple[str, str]]:
    secret = USERS[user][0] if password is None else password
    return (("authorization", "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()),)


def stub(secured) -> tuple[grpc.Channel, pb_grpc.ControllerServiceStub]:
    channel = grpc.secure_channel(f"localhost:{secured['standalone'].controller_port}",
                                  grpc.ssl_channel_credentials(secured["ca"].read_bytes()))
    return channel, pb_grpc.ControllerServiceStub(channel)


def make_scopes_and_streams(api) -> None:
    for scope in ("open", "secret"):
        api.createScope(pb.ScopeInfo(scope=scope), metadata=credentials("admin"), timeout=30)
        api.createStream(pb.StreamConfig(streamInfo=pb.StreamInfo(scope=scope, stream="s"),
                                         scalingPolicy=pb.ScalingPolicy(scaleType=0, minNumSegments=1)),
                         metadata=credentials("admin"), timeout=60)


def test_grpc_needs_credentials_and_permissions(secured):
    channel, api = stub(secured)
    with channel:
        make_scopes_and_streams(api)
        for metadata in ((), credentials("admin", "wrong")):
            with pytest.raises(grpc.RpcError) as refused:
                api.listScopes(pb.ScopesRequest(), metadata=metadata, timeout=30)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as denied:
            api.createScope(pb.ScopeInfo(scope="mine"), metadata=credentials("reader"), timeout=30)
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(grpc.RpcError) as denied:
            api.getCurrentSegments(pb.StreamInfo(scope="secret", stream="s"), metadata=credentials("reader"),
                                   timeout=30)
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert list(api.listScopes(pb.ScopesRequest(), metadata=credentials("reader"), timeout=30).scopes) == ["open"]
        assert sorted(api.listScopes(pb.ScopesRequest(), metadata=credentials("admin"), timeout=30).scopes) == [
            "open", "secret"]
        token = api.getDelegationToken(pb.StreamInfo(scope="open", stream="s"), metadata=credentials("reader"),
                                       timeout=30).delegationToken
        granted = auth.verify_token(secured["key"], token, int(time.time()))
        assert granted.permission_on(auth.stream_resource("open", "s")) == Permission.READ
        assert granted.permission_on(auth.stream_resource("secret", "s")) == Permission.NONE
        body = token.split(".")[1]
        assert "-" not in body and "_" not in body and len(body) % 4 == 0  # the Rust client's plain base64
        assert json.loads(base64.b64decode(body))["exp"] > time.time()


def test_the_wire_port_serves_only_valid_tokens(secured):
    channel, api = stub(secured)
    with channel:
        make_scopes_and_streams(api)

        def token_of(user: str, scope: str) -> str:
            return api.getDelegationToken(pb.StreamInfo(scope=scope, stream="s"), metadata=credentials(user),
                                          timeout=30).delegationToken

        writer_token, reader_token = token_of("writer", "open"), token_of("reader", "open")
    key, now = secured["key"], int(time.time())
    forged = auth.issue_token(os.urandom(64), "admin", auth.INTERNAL, now, 600)
    expired = auth.issue_token(key, "writer", Acl(((auth.stream_resource("open", "s"), Permission.READ_UPDATE),)),
                               now - 1000, 600)
    segment, other = "open/s/0.#epoch.0", "secret/s/0.#epoch.0"

    async def check() -> None:
        connection = await WireConnection.connect("localhost", secured["standalone"].store_port,
                                                  ssl_context=secured["ssl"])
        try:
            async def setup(token: str, name: str = segment):
                return await connection.request(c.SetupAppend(next_request_id(), uuid.uuid4(), name, token))

            for token, code in (("", 0), (forged, 0), (expired, 1), (reader_token, 0)):
                reply = await setup(token)
                assert isinstance(reply, c.AuthTokenCheckFailed) and reply.error_code == code, (token[:20], reply)
            assert isinstance(await setup(writer_token, other), c.AuthTokenCheckFailed)
            assert isinstance(await setup(writer_token), c.AppendSetup)
            info = await connection.request(c.GetStreamSegmentInfo(next_request_id(), segment, reader_token))
            assert isinstance(info, c.StreamSegmentInfo), info
            refused = await connection.request(c.GetStreamSegmentInfo(next_request_id(), other, reader_token))
            assert isinstance(refused, c.AuthTokenCheckFailed)
            flush = await connection.request(c.FlushToStorage(0, writer_token, next_request_id()))
            assert isinstance(flush, c.AuthTokenCheckFailed)  # admin requests need the controller's own token
        finally:
            await connection.close()

    asyncio.run(check())


def rest(secured, method: str, path: str, user: str | None = None, body: dict | None = None) -> tuple[int, dict, dict]:
    headers = {"Content-Type": "application/json"}
    if user is not None:
        headers["Authorization"] = credentials(user)[0][1]
    request = urllib.request.Request(f"https://localhost:{secured['rest']}{path}", method=method, headers=headers,
                                     data=json.dumps(body).encode() if body is not None else None)
    try:
        with urllib.request.urlopen(request, context=secured["ssl"], timeout=30) as response:
            return response.status, json.loads(response.read() or b"null"), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null"), dict(error.headers)


def test_rest_needs_credentials_and_permissions(secured):
    channel, api = stub(secured)
    with channel:
        make_scopes_and_streams(api)
    status, body, headers = rest(secured, "GET", "/v1/scopes")
    assert status == 401 and body["code"] == "Unauthenticated" and headers["WWW-Authenticate"].startswith("Basic")
    assert rest(secured, "GET", "/v1/scopes", "reader")[1] == {"scopes": [{"scopeName": "open"}]}
    assert rest(secured, "POST", "/v1/scopes", "reader", {"scopeName": "x"})[0] == 403
    assert rest(secured, "GET", "/v1/scopes/secret/streams/s", "reader")[0] == 403
    assert rest(secured, "GET", "/v1/scopes/open/streams/s", "reader")[0] == 200
    assert rest(secured, "GET", "/openapi.json")[0] == 200  # the document itself is public


def test_admin_cli_with_credentials_over_tls(secured):
    def admin(*arguments: str, password: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tributary", "admin", "--rest",
                               f"https://localhost:{secured['rest']}", "--tls-trust", str(secured["ca"]), *arguments],
                              input=password, capture_output=True, text=True, timeout=120)

    channel, api = stub(secured)
    with channel:
        make_scopes_and_streams(api)
    listed = admin("--user", "reader", "--password-stdin", "--json", "scopes", password=USERS["reader"][0] + "\n")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == {"scopes": [{"scopeName": "open"}]}
    refused = admin("scopes")
    assert refused.returncode == 1 and "Unauthenticated (401)" in refused.stderr
    wrong = admin("--user", "admin", "--password-stdin", "scopes", password="nope\n")
    assert wrong.returncode == 1 and "401" in wrong.stderr
    denied = admin("--user", "reader", "--password-stdin", "create-scope", "x", password=USERS["reader"][0] + "\n")
    assert denied.returncode == 1 and "403" in denied.stderr
    assert admin("--user", "reader", "scopes").returncode == 2  # no password given


PRAVEGA_SCRIPT = """
import asyncio, os, sys, pravega_client
manager = pravega_client.StreamManager(sys.argv[1], True, True)
scope = sys.argv[2]
manager.create_scope(scope)
manager.create_stream(scope, "s", 2)
writer = manager.create_writer(scope, "s")
for number in range(20):
    writer.write_event(f"event-{number}", f"key-{number % 3}")
writer.flush()
reader = manager.create_reader_group("group", scope, "s").create_reader("reader")

async def read():
    events = []
    while len(events) < 20:
        segment_slice = await reader.get_segment_slice_async()
        events += [event.data().decode() for event in segment_slice]
        reader.release_segment(segment_slice)
    return events

print(sorted(asyncio.run(read())), flush=True)
os._exit(0)  # skip the binding's runtime teardown (it can crash at interpreter exit)
"""


def test_the_real_client_over_tls_with_credentials(secured, tmp_path):
    uri = f"tls://localhost:{secured['standalone'].controller_port}"

    def run(password: str, scope: str, timeout: float) -> subprocess.CompletedProcess | None:
        environment = {**os.environ, "pravega_client_auth_method": "Basic", "pravega_client_auth_username": "admin",
                       "pravega_client_auth_password": password, "pravega_client_tls_cert_path": str(secured["ca"])}
        try:
            return subprocess.run([sys.executable, "-c", PRAVEGA_SCRIPT, uri, scope], capture_output=True, text=True,
                                  env=environment, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None  # (the client retries a refused call for a long while)

    ok = run(USERS["admin"][0], "tls", 120)
    assert ok is not None and ok.returncode == 0, ok and ok.stderr[-3000:]
    assert ok.stdout.strip() == str(sorted(f"event-{number}" for number in range(20)))
    refused = run("wrong", "tls-refused", 10)
    assert refused is None or refused.returncode != 0
    assert rest(secured, "GET", "/v1/scopes/tls-refused", "admin")[0] == 404  # it could do nothing


@pytest.mark.parametrize("command", ["standalone", "segmentstore", "controller"])
def test_a_token_key_too_short_for_hs512_is_refused_at_start(tmp_path, command):
    """HS512 wants 64 bytes of key (PyJWT warned InsecureKeyLengthWarning at every token with the 44-byte key the
    docs once recommended): a shorter key file is a clear error at start, naming the file and a recipe."""
    key_file = tmp_path / "token.key"
    key_file.write_text(base64.b64encode(os.urandom(32)).decode() + "\n")  # 44 characters
    passwords = tmp_path / "passwd"
    passwords.write_text("")
    options = ["--token-key-file", str(key_file)]
    if command != "segmentstore":
        options += ["--password-file", str(passwords)]
    done = subprocess.run([sys.executable, "-m", "tributary", command, *options, "--port", str(free_port())],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"{key_file}: a token key needs at least 64 bytes, it has 44" in done.stderr
    assert "head -c 48 /dev/urandom | base64" in done.stderr
