"""The SDK's controller list against a real standalone (issue 28): a URI naming several controllers, of which
the first is down, works; so does a name that resolves to several addresses, the first of them dead; and the
client learns the controllers the one it reached advertises (getControllerServerList)."""

from __future__ import annotations

import asyncio
import time

import pytest

from clients.controller_client import ControllerClient
from tests.support.processes import free_port
from tests.support.sdk import sdk
from tests.support.standalone import serve

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    yield from serve(tmp_path_factory, "sdk-controller-list", extra_args=["--advertise-address", "localhost"])


async def test_a_list_whose_first_controller_is_down_works_at_once(standalone):
    dead = free_port()
    started = time.monotonic()
    async with sdk.connect(f"tcp://127.0.0.1:{dead},tcp://127.0.0.1:{standalone.controller_port}") as client:
        assert await client.create_scope("listed")
        assert await client.scope_exists("listed")
        assert client._controller.address == f"127.0.0.1:{standalone.controller_port}"
    assert time.monotonic() - started < 5.0


async def test_a_name_with_several_addresses_is_tried_address_by_address(standalone):
    asked = []

    async def resolver(host: str, port: int) -> list[str]:
        asked.append((host, port))
        return ["127.0.0.2", "127.0.0.1"]  # nothing listens on 127.0.0.2

    controller = ControllerClient(f"tcp://controllers.test:{standalone.controller_port}", resolver=resolver)
    try:
        assert await controller.scope_exists("no-such-scope") is False
        assert asked == [("controllers.test", standalone.controller_port)]
        assert controller.address == f"controllers.test:{standalone.controller_port}"  # named as it was given
        assert controller._endpoints.current.host == "127.0.0.1"
    finally:
        await controller.close()


async def test_the_client_learns_the_advertised_controllers(standalone):
    """Given 127.0.0.1, the client learns the controller's advertised name (localhost) as another way there."""
    controller = ControllerClient(f"tcp://127.0.0.1:{standalone.controller_port}")
    try:
        await controller.scope_exists("anything")
        deadline = time.monotonic() + 5
        while f"localhost:{standalone.controller_port}" not in controller.known_addresses:
            assert time.monotonic() < deadline, controller.known_addresses
            await asyncio.sleep(0.05)
        assert controller.known_addresses[0] == f"127.0.0.1:{standalone.controller_port}"
    finally:
        await controller.close()
