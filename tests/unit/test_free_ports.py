"""The test suite's free ports: below the kernel's ephemeral range (so no outgoing connection of a parallel
test can take one before the child binds it), distinct per call, and free when handed out."""

from __future__ import annotations

import socket

from tests.support.processes import _ephemeral_low, _port_slice, free_port


def test_ports_come_from_this_workers_slice_below_the_ephemeral_range_one_after_another():
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    own = _port_slice()
    if own is None:  # a kernel whose ephemeral range leaves no room below: the kernel picks
        return
    assert all(port in own and port < _ephemeral_low() for port in ports)


def test_a_port_in_use_is_skipped():
    first = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", first))
        taken.listen()
        handed = [free_port() for _ in range(2000)]  # a whole turn of the slice
    assert first not in handed
