"""The SDK's list of controllers (clients/controller_endpoints.py): parsing a list of URIs, expanding a name to
its addresses, learning the others, and the rule for moving on when the one in use fails."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clients.controller_endpoints import (
    FAILED_RECENTLY_SECONDS,
    ControllerEndpoint,
    ControllerEndpoints,
    parse_controller_uris,
    resolve,
)
from clients.errors import InvalidArgument


def ep(host: str, port: int = 9090, name: str | None = None) -> ControllerEndpoint:
    return ControllerEndpoint(host, port, name)


def test_a_list_names_every_controller_in_order_and_says_whether_it_is_tls():
    assert parse_controller_uris("tcp://a:1,b:2 , tcp://[::1]:3") == (False, [ep("a", 1), ep("b", 2), ep("::1", 3)])
    assert parse_controller_uris("tls://a:1,b:2") == (True, [ep("a", 1), ep("b", 2)])
    assert parse_controller_uris("pravegas://a:1,ssl://b:2")[0] is True


@pytest.mark.parametrize("uri", ["tls://a:1,tcp://b:2", "a:1,,b:2", "a:1,", "a:1,b", "a:1,ftp://b:2"])
def test_a_bad_list_is_refused(uri):
    with pytest.raises(InvalidArgument):
        parse_controller_uris(uri)


def test_addresses_print_as_grpc_targets():
    assert ep("10.0.0.1").address == "10.0.0.1:9090"
    assert ep("::1").address == "[::1]:9090"
    assert ep("10.0.0.1", name="ctl.example").server_name == "ctl.example"
    assert ep("10.0.0.1").is_literal and ep("::1").is_literal and not ep("ctl.example").is_literal


async def test_a_name_becomes_one_endpoint_per_address_and_a_literal_stays():
    async def resolver(host, port):
        assert (host, port) == ("ctl.example", 9090)
        return ["10.0.0.1", "10.0.0.2", "10.0.0.1"]

    assert await resolve(ep("ctl.example"), resolver) == [ep("10.0.0.1", name="ctl.example"),
                                                          ep("10.0.0.2", name="ctl.example")]
    assert await resolve(ep("10.0.0.9"), resolver) == [ep("10.0.0.9")]


async def test_a_name_that_does_not_resolve_now_is_kept_as_it_is():
    async def failing(host, port):
        raise OSError("no such host")

    assert await resolve(ep("gone.example"), failing) == [ep("gone.example")]


def test_a_failure_moves_to_the_next_and_round_the_list():
    endpoints = ControllerEndpoints([ep("a"), ep("b"), ep("c")])
    assert endpoints.current == ep("a")
    assert endpoints.failed(ep("a"), now=100.0) and endpoints.current == ep("b")
    assert endpoints.failed(ep("b"), now=100.1) and endpoints.current == ep("c")
    assert not endpoints.all_failed_recently(100.2)
    # every one failed recently: the one that failed longest ago is tried again
    assert endpoints.failed(ep("c"), now=100.2) and endpoints.current == ep("a")
    assert endpoints.all_failed_recently(100.3)


def test_a_recent_failure_is_skipped_and_an_old_one_forgiven():
    endpoints = ControllerEndpoints([ep("a"), ep("b"), ep("c")])
    endpoints.failed(ep("b"), now=10.0)  # not the current one: it only notes the failure
    assert endpoints.current == ep("a")
    endpoints.failed(ep("a"), now=11.0)
    assert endpoints.current == ep("c"), "b failed a second ago"
    endpoints.failed(ep("c"), now=10.0 + FAILED_RECENTLY_SECONDS + 0.5)
    assert endpoints.current == ep("b"), "b's failure is old by now, and a's is still recent"


def test_a_success_clears_the_failure_and_a_stale_failure_report_moves_nothing():
    endpoints = ControllerEndpoints([ep("a"), ep("b")])
    endpoints.failed(ep("a"), now=1.0)
    assert endpoints.current == ep("b")
    endpoints.succeeded(ep("a"))
    assert not endpoints.failed(ep("a"), now=1.5), "a call still on a's channel fails late: b stays"
    assert endpoints.current == ep("b")


def test_learnt_controllers_come_after_the_given_ones_without_duplicates():
    endpoints = ControllerEndpoints([ep("10.0.0.1", name="ctl.example"), ep("b")])
    new = endpoints.learn([ep("10.0.0.1"), ep("ctl.example"), ep("b"), ep("c"), ep("c"), ep("b", 9091)])
    assert new == [ep("c"), ep("b", 9091)]
    assert list(endpoints) == [ep("10.0.0.1", name="ctl.example"), ep("b"), ep("c"), ep("b", 9091)]


def test_a_name_replaced_by_its_addresses_keeps_its_place_and_the_current_one():
    endpoints = ControllerEndpoints([ep("x"), ep("ctl.example"), ep("y")])
    endpoints.failed(ep("x"), now=1.0)
    assert endpoints.current == ep("ctl.example")
    addresses = [ep("10.0.0.1", name="ctl.example"), ep("10.0.0.2", name="ctl.example")]
    endpoints.replace(ep("ctl.example"), addresses)
    assert list(endpoints) == [ep("x"), *addresses, ep("y")]
    assert endpoints.current == addresses[0]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), st.lists(st.tuples(st.integers(0, 5), st.floats(0, 30)), max_size=30))
def test_the_current_one_is_always_a_known_one_and_moves_only_on_its_own_failure(count, failures):
    endpoints = ControllerEndpoints([ep(f"h{index}") for index in range(count)])
    now = 0.0
    for index, step in failures:
        now += step
        failing = ep(f"h{index % count}")
        before = endpoints.current
        moved = endpoints.failed(failing, now)
        assert endpoints.current in list(endpoints)
        assert moved == (failing == before and count > 1)
        if moved:
            assert endpoints.current != before
