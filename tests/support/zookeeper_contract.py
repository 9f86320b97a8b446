"""What ``coordination.zookeeper.ZooKeeper`` promises, written once and checked against both a real ZooKeeper
(tests/unit/coordination/test_zookeeper_contract.py) and the simulated one (tests/simulation/zookeeper_sim.py,
tests/simulation/test_zookeeper_sim.py).

Each case is a plain ``async`` function taking ``connect``: a factory of started clients, each a new session
rooted at the same empty chroot (the caller stops them afterwards). Waiting goes by ``time.monotonic()`` and
``asyncio.sleep``, so the same code runs on real time and on a world's virtual time. What the cases do not
assume: the order of ``get_children`` (a real server answers in hash order), how soon a watch fires beyond a
few seconds, or a session timeout (the real test server allows at most 4 s, the model 40 s by default).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable

from kazoo.exceptions import NotEmptyError

from coordination.zookeeper import BadVersionError, NodeExistsError, NoNodeError, ZooKeeper

Connect = Callable[[], Awaitable[ZooKeeper]]
Case = Callable[[Connect], Awaitable[None]]

WAIT_SECONDS = 10.0  # a watch or a deletion is seen within this (a real server: milliseconds)
_SEQUENTIAL = re.compile(r"^n_(\d{10})$")


async def eventually(predicate: Callable[[], bool], seconds: float = WAIT_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"not within {seconds} s"
        await asyncio.sleep(0.01)


async def eventually_async(predicate: Callable[[], Awaitable[bool]], seconds: float = WAIT_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while not await predicate():
        assert time.monotonic() < deadline, f"not within {seconds} s"
        await asyncio.sleep(0.01)


async def create_get_set_and_versions(connect: Connect) -> None:
    zk = await connect()
    assert await zk.create("/a", b"one") == "/a"
    assert await zk.get("/a") == (b"one", 0)
    assert await zk.set("/a", b"two") == 1
    assert await zk.set_if("/a", b"three", 1) == 2
    assert await zk.get("/a") == (b"three", 2)
    try:
        await zk.set_if("/a", b"stale", 1)
        raise AssertionError("set_if at an old version succeeded")
    except BadVersionError:
        pass
    assert await zk.get("/a") == (b"three", 2)
    data, mtime = await zk.get_with_mtime("/a")
    assert data == b"three" and abs(mtime - time.time()) < 60
    assert await zk.exists("/a") and not await zk.exists("/b")
    assert await zk.create("/empty") == "/empty"
    assert await zk.get("/empty") == (b"", 0)


async def errors_where_the_server_refuses(connect: Connect) -> None:
    zk = await connect()
    await zk.create("/p", b"")
    await zk.create("/p/child", b"x")
    for attempt in (zk.create("/p", b"again"), zk.create("/p/child")):
        try:
            await attempt
            raise AssertionError("a second create succeeded")
        except NodeExistsError:
            pass
    for missing in (zk.get("/nothing"), zk.set("/nothing", b""), zk.set_if("/nothing", b"", 0),
                    zk.get_children("/nothing"), zk.get_with_mtime("/nothing"), zk.create("/no/parent", b"")):
        try:
            await missing
            raise AssertionError("a call on a missing znode succeeded")
        except NoNodeError:
            pass
    try:
        await zk.delete("/p")
        raise AssertionError("deleted a znode that has children")
    except NotEmptyError:
        pass
    try:
        await zk.delete("/p/child", version=7)
        raise AssertionError("deleted at a wrong version")
    except BadVersionError:
        pass
    await zk.delete("/nothing")  # a znode already gone counts as deleted
    await zk.delete("/p/child", version=0)
    await zk.delete("/p")
    assert not await zk.exists("/p")


async def sequential_names_increase(connect: Connect) -> None:
    zk = await connect()
    await zk.create("/q")
    made = [await zk.create("/q/n_", str(i).encode(), sequence=True) for i in range(3)]
    names = [path.rpartition("/")[2] for path in made]
    numbers = []
    for name in names:
        match = _SEQUENTIAL.match(name)
        assert match is not None, name
        numbers.append(int(match.group(1)))
    assert numbers == sorted(numbers) and len(set(numbers)) == 3
    await zk.delete(made[0])
    later = await zk.create("/q/n_", b"", sequence=True)  # never reuses a number, even after a delete
    match = _SEQUENTIAL.match(later.rpartition("/")[2])
    assert match is not None and int(match.group(1)) > numbers[-1]
    assert sorted(await zk.get_children("/q")) == sorted([*names[1:], later.rpartition("/")[2]])
    assert [(await zk.get(path))[0] for path in made[1:]] == [b"1", b"2"]


async def makepath_and_ensure_path(connect: Connect) -> None:
    zk = await connect()
    assert await zk.create("/x/y/z", b"leaf", makepath=True) == "/x/y/z"
    assert await zk.get("/x") == (b"", 0) and await zk.get("/x/y") == (b"", 0)
    assert await zk.get("/x/y/z") == (b"leaf", 0)
    await zk.ensure_path("/e/f/g")
    await zk.ensure_path("/e/f/g")  # again: nothing to do
    await zk.ensure_path("/x/y")
    assert await zk.exists("/e/f/g") and await zk.get("/x/y/z") == (b"leaf", 0)
    seq = await zk.create("/s/t/n_", b"", sequence=True, makepath=True)
    assert _SEQUENTIAL.match(seq.rpartition("/")[2]) and seq.startswith("/s/t/")


async def children_in_any_order(connect: Connect) -> None:
    zk = await connect()
    await zk.create("/c")
    names = [f"m{i:02d}" for i in (5, 1, 9, 3, 7, 0, 8, 2, 6, 4)]
    for name in names:
        await zk.create(f"/c/{name}")
    assert sorted(await zk.get_children("/c")) == sorted(names)  # the order is the server's: never relied on
    assert await zk.get_children("/c/m01") == []
    root = await zk.get_children("/")
    assert "c" in root


async def ephemeral_nodes_go_with_a_stopped_session(connect: Connect) -> None:
    owner, other = await connect(), await connect()
    await owner.create("/members")
    made = await owner.create("/members/owner", b"me", ephemeral=True)
    seq = await owner.create("/members/n_", b"", ephemeral=True, sequence=True)
    assert await other.get(made) == (b"me", 0) and await other.exists(seq)
    try:
        await owner.create("/members/owner/child")
        raise AssertionError("an ephemeral znode got a child")
    except Exception as error:  # kazoo's NoChildrenForEphemeralsError
        assert type(error).__name__ == "NoChildrenForEphemeralsError", error
    await owner.stop()
    assert not await other.exists(made) and not await other.exists(seq)
    assert await other.exists("/members"), "a persistent parent stays"


async def a_data_watch_and_a_child_watch_each_fire_once(connect: Connect) -> None:
    watcher, writer = await connect(), await connect()
    await writer.create("/w", b"0")
    data_fired: list[float] = []
    child_fired: list[float] = []
    assert await watcher.get("/w", watch=lambda: data_fired.append(time.monotonic())) == (b"0", 0)
    assert await watcher.get_children("/w", watch=lambda: child_fired.append(time.monotonic())) == []
    await writer.set("/w", b"1")
    await eventually(lambda: len(data_fired) == 1)
    assert child_fired == [], "a data change does not fire a child watch"
    await writer.create("/w/kid")
    await eventually(lambda: len(child_fired) == 1)
    await writer.set("/w", b"2")  # one-shot: neither fires again
    await writer.create("/w/kid2")
    await writer.delete("/w/kid")
    await asyncio.sleep(0.5)
    assert (len(data_fired), len(child_fired)) == (1, 1)
    assert sorted(await watcher.get_children("/w")) == ["kid2"]


async def a_watch_sees_the_change_before_the_new_data(connect: Connect) -> None:
    """ZooKeeper's ordering guarantee: the watcher is notified before it can read what changed."""
    watcher, writer = await connect(), await connect()
    await writer.create("/o", b"old")
    seen: list[str] = []
    await watcher.get("/o", watch=lambda: seen.append("event"))
    await writer.set("/o", b"new")
    while True:
        data, _ = await watcher.get("/o")
        if data == b"new":
            break
        seen.append("old")
        await asyncio.sleep(0.001)
    assert "event" in seen, "the new data was read before the watch fired"


async def exists_watches_a_missing_node_until_it_is_created(connect: Connect) -> None:
    watcher, writer = await connect(), await connect()
    fired: list[float] = []
    assert not await watcher.exists("/later", watch=lambda: fired.append(time.monotonic()))
    await asyncio.sleep(0.2)
    assert fired == []
    await writer.create("/later", b"here")
    await eventually(lambda: len(fired) == 1)
    gone: list[float] = []
    assert await watcher.exists("/later", watch=lambda: gone.append(time.monotonic()))
    await writer.delete("/later")
    await eventually(lambda: len(gone) == 1)


async def deleting_a_watched_node_fires_its_watches(connect: Connect) -> None:
    watcher, writer = await connect(), await connect()
    await writer.create("/d/x", b"", makepath=True)
    data_fired: list[int] = []
    child_fired: list[int] = []
    parent_fired: list[int] = []
    await watcher.get("/d/x", watch=lambda: data_fired.append(1))
    await watcher.get_children("/d/x", watch=lambda: child_fired.append(1))
    await watcher.get_children("/d", watch=lambda: parent_fired.append(1))
    await writer.delete("/d/x")
    await eventually(lambda: (len(data_fired), len(child_fired), len(parent_fired)) == (1, 1, 1))


CASES: list[Case] = [
    create_get_set_and_versions,
    errors_where_the_server_refuses,
    sequential_names_increase,
    makepath_and_ensure_path,
    children_in_any_order,
    ephemeral_nodes_go_with_a_stopped_session,
    a_data_watch_and_a_child_watch_each_fire_once,
    a_watch_sees_the_change_before_the_new_data,
    exists_watches_a_missing_node_until_it_is_created,
    deleting_a_watched_node_fires_its_watches,
]
