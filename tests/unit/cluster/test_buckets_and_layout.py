"""Bucket ownership by rendezvous hashing, and the cluster's ZooKeeper records (``coordination.cluster``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.cluster.buckets import bucket_of, bucket_owners
from coordination.cluster import ClusterPaths, ClusterSettings, ContainerMap, ControllerRegistration, StoreRegistration

CONTROLLERS = [f"c{index:02d}" for index in range(8)]


def test_every_bucket_has_one_owner_and_the_load_is_spread():
    owners = bucket_owners(CONTROLLERS[:3], 64)
    assert sorted(owners) == list(range(64))
    shares = [list(owners.values()).count(controller) for controller in CONTROLLERS[:3]]
    assert min(shares) >= 10


@given(st.sets(st.sampled_from(CONTROLLERS), min_size=2))
def test_a_leaving_controller_moves_only_its_own_buckets(controllers):
    before = bucket_owners(controllers, 64)
    gone = sorted(controllers)[0]
    after = bucket_owners(controllers - {gone}, 64)
    for bucket, owner in before.items():
        if owner != gone:
            assert after[bucket] == owner
        else:
            assert after[bucket] != gone


def test_streams_fall_into_stable_buckets():
    assert bucket_of("scope", "stream", 64) == bucket_of("scope", "stream", 64)
    assert len({bucket_of("scope", f"stream-{index}", 64) for index in range(200)}) > 50


def test_records_round_trip_and_bad_ones_are_refused():
    registration = StoreRegistration("127.0.0.1", 12345, (0, 2), (1,), 12.5)
    assert StoreRegistration.from_json(registration.to_json()) == registration
    assert registration.store_id == "127.0.0.1:12345"
    container_map = ContainerMap({0: "a:1", 3: "b:2"})
    assert ContainerMap.from_json(container_map.to_json()) == container_map
    assert container_map.containers_of("a:1") == {0}
    assert ControllerRegistration.from_json(ControllerRegistration("h", 9090, 1.0).to_json()) == \
        ControllerRegistration("h", 9090, 1.0)
    assert ClusterSettings.from_json(ClusterSettings(4).to_json()) == ClusterSettings(4)
    for bad in (b"", b"[]", b'{"owners": 3}', b'{"owners": {"x": "a:1"}}', b"\xff"):
        with pytest.raises(ValueError):
            ContainerMap.from_json(bad)
    for bad in (b"{}", b'{"container_count": 0}', b'{"container_count": "4"}'):
        with pytest.raises(ValueError):
            ClusterSettings.from_json(bad)
    with pytest.raises(ValueError):
        StoreRegistration.from_json(b'{"host": "h"}')


def test_lease_names_keep_any_stream_name_in_one_znode():
    paths = ClusterPaths("/root")
    assert paths.lease("workflow", "scope/stream") == "/root/cluster/leases/workflow:scope%2Fstream"
    assert paths.lease("workflow", "a%2Fb") != paths.lease("workflow", "a/b")
