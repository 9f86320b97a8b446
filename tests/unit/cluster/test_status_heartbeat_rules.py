"""``tributary status``'s heartbeat rule (tributary/cluster_status.py): a segment store whose registration is older
than the threshold is unknown, its containers are not served, and the text says so; the JSON keeps its fields."""

from __future__ import annotations

from coordination.cluster import ContainerMap, StoreRegistration
from tributary.cluster_status import describe, describe_store, served, store_state, unserved_containers

MAP = ContainerMap({0: "a:1", 1: "b:2", 2: "a:1", 3: "b:2"})


def stores(age_a: float, age_b: float, stale_after: float = 3.0) -> dict[str, dict]:
    return {"a:1": store_state(StoreRegistration("a", 1, (0, 2)), [0, 2], age_a, stale_after),
            "b:2": store_state(StoreRegistration("b", 2, (1,), (3,)), [1, 3], age_b, stale_after)}


def test_a_store_seen_within_the_threshold_serves_and_one_older_is_unknown():
    fresh = stores(0.4, 3.0)
    assert [fresh[store]["state"] for store in ("a:1", "b:2")] == ["serving", "serving"]
    assert unserved_containers(4, MAP, fresh) == [3]  # still recovering
    stale = stores(3.01, 0.2)
    assert stale["a:1"]["state"] == "unknown" and stale["a:1"]["serving"] == [0, 2]  # what it last reported
    assert unserved_containers(4, MAP, stale) == [0, 2, 3]
    assert unserved_containers(4, ContainerMap({0: "gone:9"}), stale) == [0, 1, 2, 3]


def test_the_lines_say_how_long_ago_a_store_was_seen_and_the_exit_status_counts_unknown_ones():
    cluster = {"container_count": 4, "segment_stores": stores(5.24, 0.9), "controllers": {}, "leader": None,
               "log_stores": {}}
    cluster["unserved"] = unserved_containers(4, MAP, cluster["segment_stores"])
    lines = describe(cluster)
    assert lines == ["segment store a:1: unknown, not seen for 5.2 s (it last reported serving containers 0,2)",
                     "segment store b:2: serving containers 1, recovering 3 (last seen 0.9 s ago)",
                     "NOT SERVED: containers 0,2,3 of 4"]
    assert not served(cluster)
    old = {"serving": [0], "starting": [], "waiting": []}  # a document without the heartbeat fields
    assert describe_store("c:3", old) == "segment store c:3: serving containers 0"
