"""ACLs, delegation tokens (wire/auth.py) and the controller's credentials and RPC rules (controller/security.py)."""

import base64
import json
import types

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from controller import security
from wire import auth
from wire.auth import Acl, Permission

KEY = b"k" * 64


def test_acl_parse_and_text_round_trip():
    acl = Acl.parse(" prn::/scope:a,READ_UPDATE ; prn::/scope:a/*,read;; ")
    assert acl.entries == (("prn::/scope:a", Permission.READ_UPDATE), ("prn::/scope:a/*", Permission.READ))
    assert Acl.parse(acl.text()) == acl


@pytest.mark.parametrize("text", ["scope:a,READ", "prn::/scope:a", "prn::/scope:a,WRITE"])
def test_acl_parse_rejects_malformed_entries(text):
    with pytest.raises(auth.InvalidAcl):
        Acl.parse(text)


def test_permission_is_the_highest_matching_entry():
    acl = Acl.parse("prn::/scope:a/*,READ;prn::/scope:a/stream:s,READ_UPDATE")
    assert acl.permission_on(auth.stream_resource("a", "s")) == Permission.READ_UPDATE
    assert acl.permission_on(auth.stream_resource("a", "t")) == Permission.READ
    assert acl.permission_on(auth.scope_resource("a")) == Permission.NONE  # "/*" needs something after the scope
    assert acl.permission_on(auth.stream_resource("b", "s")) == Permission.NONE
    assert acl.allows(auth.stream_resource("a", "t"), Permission.READ)
    assert not acl.allows(auth.stream_resource("a", "t"), Permission.READ_UPDATE)


def test_segments_belong_to_their_stream_resource():
    assert auth.segment_resource("sc/st/3.#epoch.1") == auth.stream_resource("sc", "st")
    assert auth.segment_resource("sc/st/3.#epoch.1#transaction.00000000000000000000000000000001") == \
        auth.stream_resource("sc", "st")
    assert auth.segment_resource("sc/t_kvtable/0") == auth.stream_resource("sc", "t_kvtable")


def test_a_mark_stream_is_authorised_as_its_stream():
    """Whoever may read a stream may read its watermarks (Java maps _MARK<stream> the same way)."""
    assert auth.stream_resource("sc", "_MARKst") == auth.stream_resource("sc", "st") == "prn::/scope:sc/stream:st"
    assert auth.segment_resource("sc/_MARKst/0.#epoch.0") == auth.stream_resource("sc", "st")
    assert auth.stream_resource("sc", "_MARK") == "prn::/scope:sc/stream:_MARK"
    reader = auth.Acl.parse("prn::/scope:sc/stream:st,READ")
    assert reader.allows(auth.segment_resource("sc/_MARKst/0.#epoch.0"), auth.Permission.READ)
    assert not reader.allows(auth.segment_resource("sc/_MARKother/0.#epoch.0"), auth.Permission.READ)


def test_scoped_to_keeps_only_the_entries_that_grant_on_the_resources():
    acl = Acl.parse("prn::/scope:a/*,READ;prn::/scope:b/*,READ_UPDATE")
    assert Acl.parse("prn::/scope:a/*,READ") == acl.scoped_to([auth.stream_resource("a", "s")])


def test_token_round_trip_grants_the_acl():
    acl = Acl.parse("prn::/scope:a/stream:s,READ_UPDATE")
    token = auth.issue_token(KEY, "alice", acl, now=1000, ttl_seconds=60)
    assert auth.verify_token(KEY, token, now=1059) == acl


def test_expired_token_is_rejected_as_expired():
    token = auth.issue_token(KEY, "alice", Acl(), now=1000, ttl_seconds=60)
    with pytest.raises(auth.TokenRejected) as rejected:
        auth.verify_token(KEY, token, now=1060)
    assert rejected.value.expired


@pytest.mark.parametrize("token", ["", "not-a-token", "a.b.c"])
def test_malformed_tokens_are_rejected(token):
    with pytest.raises(auth.TokenRejected) as rejected:
        auth.verify_token(KEY, token, now=0)
    assert not rejected.value.expired


def test_token_signed_with_another_key_is_rejected():
    token = auth.issue_token(b"x" * 64, "mallory", auth.INTERNAL, now=1000, ttl_seconds=60)
    with pytest.raises(auth.TokenRejected):
        auth.verify_token(KEY, token, now=1000)


def test_token_with_edited_claims_is_rejected():
    token = auth.issue_token(KEY, "alice", Acl.parse("prn::/scope:a/*,READ"), now=1000, ttl_seconds=60)
    header, body, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims["prn::/scope:a/*"] = "READ_UPDATE"
    forged_body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    with pytest.raises(auth.TokenRejected):
        auth.verify_token(KEY, f"{header}.{forged_body}.{signature}", now=1000)


def test_token_for_another_audience_is_rejected():
    import jwt
    token = jwt.encode({"sub": "alice", "aud": "controller", "exp": 2000}, KEY, algorithm=auth.ALGORITHM)
    with pytest.raises(auth.TokenRejected):
        auth.verify_token(KEY, token, now=1000)


@settings(max_examples=200, deadline=None)
@given(subject=st.text(max_size=40), scope=st.text(min_size=1, max_size=30), now=st.integers(0, 2**40),
       ttl=st.integers(1, 10**6))
@example(subject="", scope="[0]", now=0, ttl=1)  # fnmatch read the brackets as a character class
def test_token_body_decodes_with_a_plain_padded_base64_decoder(subject, scope, now, ttl):
    """The Rust client reads ``exp`` with the standard (padded, non-URL-safe) alphabet."""
    token = auth.issue_token(KEY, subject, Acl(((auth.scope_resource(scope), Permission.READ),)), now, ttl)
    body = token.split(".")[1]
    claims = json.loads(base64.b64decode(body, validate=True))
    assert claims["exp"] == now + ttl and claims["sub"] == subject
    assert auth.verify_token(KEY, token, now).permission_on(auth.scope_resource(scope)) == Permission.READ


# ---------------------------------------------------------------------- controller/security.py


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture(scope="module")
def users():
    return {"admin": (security.hash_password("secret", iterations=1000), Acl.parse("prn::*,READ_UPDATE")),
            "reader": (security.hash_password("pw", iterations=1000), Acl.parse("prn::/scope:a/*,READ"))}


def test_password_file_round_trip(tmp_path, users):
    path = tmp_path / "passwd"
    path.write_text("# users\n\n" + "".join(f"{user}:{stored}:{acl.text()}\n" for user, (stored, acl) in users.items()))
    assert security.load_password_file(path) == users


@pytest.mark.parametrize("line", ["admin", "admin:plain:prn::*,READ", "admin:pbkdf2_sha256$1$a$b:prn::*,WRITE"])
def test_malformed_password_file_lines_are_rejected(tmp_path, line):
    path = tmp_path / "passwd"
    path.write_text(line + "\n")
    with pytest.raises(security.InvalidPasswordFile, match="passwd:1"):
        security.load_password_file(path)


@pytest.mark.parametrize("header", [None, "", "Bearer x", "Basic !!!", _basic("admin", "wrong"),
                                    _basic("nobody", "secret"), "Basic " + base64.b64encode(b"admin").decode()])
def test_authentication_rejects_missing_or_wrong_credentials(users, header):
    with pytest.raises(security.Unauthenticated):
        security.Security(users, KEY).authenticate(header)


def test_authentication_accepts_right_credentials(users):
    principal = security.Security(users, KEY).authenticate(_basic("reader", "pw"))
    assert principal.user == "reader" and principal.acl == users["reader"][1]


@pytest.mark.parametrize("method", sorted(security.RPC_RULES))
def test_every_rpc_rule_finds_its_resource_in_the_real_request_message(method):
    """Each rule reads fields the method's request message has (noteTimestampFromWriter once did not)."""
    from google.protobuf import message_factory

    from controller_api import controller_pb2 as pb

    descriptor = pb.DESCRIPTOR.services_by_name["ControllerService"].methods_by_name[method].input_type
    request = message_factory.GetMessageClass(descriptor)()
    for field in descriptor.fields:  # fill every StreamInfo-like field so names are non-empty
        if field.message_type is not None and field.message_type.name == "StreamInfo":
            getattr(request, field.name).scope, getattr(request, field.name).stream = "sc", "st"
    resource_of, _ = security.RPC_RULES[method]
    found = resource_of(request)
    assert all(resource.startswith("prn::") for resource in ((found,) if isinstance(found, str) else found))


def test_rpc_rules_authorize_by_resource(users):
    checker = security.Security(users, KEY)
    stream = types.SimpleNamespace(scope="a", stream="s")
    info = types.SimpleNamespace(streamInfo=stream)
    assert security.check_rpc(checker, "getCurrentSegments", stream, _basic("reader", "pw")).user == "reader"
    with pytest.raises(security.PermissionDenied):
        security.check_rpc(checker, "scale", info, _basic("reader", "pw"))
    with pytest.raises(security.PermissionDenied):
        security.check_rpc(checker, "getCurrentSegments", types.SimpleNamespace(scope="b", stream="s"),
                           _basic("reader", "pw"))
    with pytest.raises(security.PermissionDenied):  # a method without a rule needs everything
        security.check_rpc(checker, "someFutureMethod", stream, _basic("reader", "pw"))
    assert security.check_rpc(checker, "someFutureMethod", stream, _basic("admin", "secret")).user == "admin"


def test_delegation_token_grants_exactly_the_callers_permission(users):
    clock = [5000.0]
    checker = security.Security(users, KEY, token_ttl_seconds=30, clock=lambda: clock[0])
    reader = checker.authenticate(_basic("reader", "pw"))
    granted = auth.verify_token(KEY, checker.token_for(reader, "a", "s"), now=5000)
    assert granted.permission_on(auth.segment_resource("a/s/0.#epoch.0")) == Permission.READ
    assert granted.permission_on(auth.segment_resource("a/t/0.#epoch.0")) == Permission.NONE
    with pytest.raises(auth.TokenRejected):
        auth.verify_token(KEY, checker.token_for(reader, "a", "s"), now=5030)


def test_table_segment_tokens_follow_reader_group_and_table_permissions():
    users = {"u": (security.hash_password("p", iterations=1000),
                   Acl.parse("prn::/scope:a/reader-group:g,READ_UPDATE;prn::/scope:a/key-value-table:k,READ"))}
    checker = security.Security(users, KEY, clock=lambda: 100.0)
    user = checker.authenticate(_basic("u", "p"))
    assert checker.stream_permission(user, "a", "g_kvtable") == Permission.READ_UPDATE
    assert checker.stream_permission(user, "a", "k_kvtable") == Permission.READ
    assert checker.stream_permission(user, "a", "other_kvtable") == Permission.NONE
    assert checker.stream_permission(user, "a", "_RGg_kvtable") == Permission.READ_UPDATE  # the SDK's group state
    assert checker.stream_permission(user, "a", "_RGother_kvtable") == Permission.NONE
    request = types.SimpleNamespace(scope="a", stream="_RGg_kvtable")
    assert security.check_rpc(checker, "getDelegationToken", request, _basic("u", "p")).user == "u"
    with pytest.raises(security.PermissionDenied):
        security.check_rpc(checker, "getDelegationToken", types.SimpleNamespace(scope="a", stream="s"),
                           _basic("u", "p"))


def test_internal_token_is_renewed_after_half_its_life(users):
    clock = [1000.0]
    checker = security.Security(users, KEY, token_ttl_seconds=100, clock=lambda: clock[0])
    first = checker.internal_token()
    clock[0] = 1049
    assert checker.internal_token() == first
    clock[0] = 1050
    renewed = checker.internal_token()
    assert renewed != first
    assert auth.verify_token(KEY, renewed, now=1149) == auth.INTERNAL


def test_segment_store_remembers_verified_tokens_but_still_checks_expiry():
    """A token checked once is not re-verified per request, yet it is refused once it expires; a forged
    token is never remembered; the memory is bounded."""
    from server.auth import VERIFIED_TOKENS_MAX, TokenChecker
    from wire import commands as c

    clock = [1000.0]
    checker = TokenChecker(KEY, clock=lambda: clock[0])
    token = auth.issue_token(KEY, "u", Acl.parse("prn::/scope:a/stream:s,READ"), 1000, 60)
    read = c.ReadSegment("a/s/0.#epoch.0", 0, 10, token, 1)
    assert checker.check(read) is None and checker.check(read) is None
    assert len(checker._verified) == 1
    clock[0] = 1060.0
    assert checker.check(read).error_code == c.AuthTokenCheckFailed.TOKEN_EXPIRED
    forged = auth.issue_token(b"another key" * 8, "u", Acl.parse("prn::*,READ_UPDATE"), 1000, 600)
    assert checker.check(c.ReadSegment("a/s/0.#epoch.0", 0, 10, forged, 2)) is not None
    assert forged not in checker._verified
    for number in range(VERIFIED_TOKENS_MAX + 5):
        other = auth.issue_token(KEY, f"u{number}", Acl(), 1000, 600)
        checker.check(c.ReadSegment("a/s/0.#epoch.0", 0, 10, other, 3))
    assert len(checker._verified) <= VERIFIED_TOKENS_MAX


def test_only_the_star_is_a_wildcard_in_acl_patterns():
    """docs/security.md: ``*`` matches any run of characters. ``?`` and ``[...]`` are plain characters (fnmatch made
    ``prn::/scope:[0]`` match scope ``0`` and not itself, and ``a?c`` match ``abc``)."""
    assert auth.matches("prn::/scope:[0]", "prn::/scope:[0]") and not auth.matches("prn::/scope:0", "prn::/scope:[0]")
    assert not auth.matches("prn::/scope:abc", "prn::/scope:a?c") and auth.matches("prn::/scope:a?c", "prn::/scope:a?c")
    assert auth.matches("prn::/scope:s/stream:x", "prn::/scope:s/*") and auth.matches("prn::/x", "prn::*")
    assert not auth.matches("prn::/scope:s2", "prn::/scope:s") and auth.matches("prn::/scope:a.b", "prn::/scope:a*b")
