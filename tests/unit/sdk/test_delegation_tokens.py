"""clients.security.DelegationTokens: one token per stream, fetched when missing, renewed after half its
life (in the background once held), dropped when a store says it expired; empty without credentials."""

import asyncio

import pytest

from clients.errors import ControllerUnavailable, InvalidArgument
from clients.security import DelegationTokens, basic_authorization, token_expiry
from wire import auth

KEY = b"k" * 64


class Controller:
    def __init__(self, clock):
        self.clock = clock
        self.fetched: list[tuple[str, str]] = []
        self.down = False

    async def fetch(self, scope: str, stream: str) -> str:
        if self.down:
            raise ControllerUnavailable("down")
        self.fetched.append((scope, stream))
        return auth.issue_token(KEY, "u", auth.Acl(), int(self.clock[0]), 100)


@pytest.fixture
def clock():
    return [1000.0]


async def test_tokens_are_fetched_per_stream_and_reused(clock):
    controller = Controller(clock)
    tokens = DelegationTokens(controller.fetch, enabled=True, clock=lambda: clock[0])
    assert tokens.token_for("a/s/0.#epoch.0") == ""  # nothing held yet
    await tokens.ensure("a/s/0.#epoch.0")
    await tokens.ensure("a/s/3.#epoch.1#transaction.00000000000000000000000000000001")
    await tokens.ensure("a/t/0.#epoch.0")
    assert controller.fetched == [("a", "s"), ("a", "t")]
    token = tokens.token_for("a/s/1.#epoch.0")
    assert token_expiry(token) == 1100


async def test_a_token_past_half_its_life_is_renewed_in_the_background(clock):
    controller = Controller(clock)
    tokens = DelegationTokens(controller.fetch, enabled=True, clock=lambda: clock[0])
    await tokens.ensure("a/s/0")
    old = tokens.token_for("a/s/0")
    clock[0] = 1049
    assert tokens.token_for("a/s/0") == old and len(controller.fetched) == 1
    clock[0] = 1051
    assert tokens.token_for("a/s/0") == old  # still usable while the renewal runs
    assert tokens.token_for("a/s/0") == old
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(controller.fetched) == 2  # one renewal, however often it was asked for
    assert token_expiry(tokens.token_for("a/s/0")) == 1151


async def test_a_failed_background_renewal_keeps_the_old_token(clock):
    controller = Controller(clock)
    tokens = DelegationTokens(controller.fetch, enabled=True, clock=lambda: clock[0])
    await tokens.ensure("a/s/0")
    old = tokens.token_for("a/s/0")
    controller.down, clock[0] = True, 1060
    assert tokens.token_for("a/s/0") == old
    await asyncio.sleep(0)
    assert tokens.token_for("a/s/0") == old
    with pytest.raises(ControllerUnavailable):  # ensure() reports it (a flow's attach retries)
        await tokens.ensure("a/s/0")
    await tokens.close()


async def test_an_expired_token_is_dropped_and_fetched_again(clock):
    controller = Controller(clock)
    tokens = DelegationTokens(controller.fetch, enabled=True, clock=lambda: clock[0])
    await tokens.ensure("a/s/0")
    tokens.expired("a/s/0.#epoch.0")
    assert tokens.token_for("a/s/0") == ""
    await tokens.ensure("a/s/0")
    assert len(controller.fetched) == 2


async def test_without_credentials_tokens_are_empty_and_never_fetched(clock):
    controller = Controller(clock)
    tokens = DelegationTokens(controller.fetch, enabled=False)
    await tokens.ensure("a/s/0")
    assert tokens.token_for("a/s/0") == "" and controller.fetched == []


async def test_a_token_without_expiry_is_kept(clock):
    async def fetch(scope, stream):
        return ""  # a controller without auth answers with an empty token
    tokens = DelegationTokens(fetch, enabled=True, clock=lambda: clock[0])
    await tokens.ensure("a/s/0")
    clock[0] = 10**9
    assert tokens.token_for("a/s/0") == ""
    assert token_expiry("not.a-token") is None and token_expiry("") is None


def test_basic_authorization():
    assert basic_authorization(("alice", "p:w")) == "Basic YWxpY2U6cDp3"
    with pytest.raises(InvalidArgument):
        basic_authorization(("a:b", "pw"))
