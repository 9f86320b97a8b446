"""Key-value tables through Tributary's SDK against `tributary standalone`: a conformance suite.

Management (create, list, delete: the partitions go with the table), reads and conditional changes
with their errors, atomic batches of one key family (a failed condition changes nothing), iteration
by key family, secondary range and prefix, primary range and prefix, and all of it (in key order over
every partition), client-side key checks, conditional updates racing from many tasks (exactly one
winner per version), and a hypothesis state machine holding a table to a dict."""

from __future__ import annotations

import asyncio
import collections
import itertools

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

import tributary
from clients.errors import NoSuchSegment
from tests.support.standalone import serve
from tributary import (
    BadKeyVersion,
    ClosedError,
    ConditionalTableUpdateError,
    Insert,
    InvalidArgument,
    KeyValueTable,
    KeyValueTableConfiguration,
    KeyValueTableNotFound,
    NoSuchKey,
    Put,
    Remove,
    ScopeNotEmpty,
    ScopeNotFound,
    TableEntry,
    TableKey,
    Version,
)
from wire import naming
from wire.constants import MAX_TABLE_VALUE_LENGTH

pytestmark = pytest.mark.process

FAMILIES = KeyValueTableConfiguration(partition_count=3, primary_key_length=2, secondary_key_length=2)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    yield from serve(tmp_path_factory, "sdk-kvt")


@pytest.fixture
async def client(standalone):
    async with tributary.connect(standalone.controller_uri) as client:
        yield client


async def new_table(client, scope: str, name: str = "t",
                    config: KeyValueTableConfiguration = FAMILIES) -> KeyValueTable:
    await client.create_scope(scope)
    assert await client.create_key_value_table(scope, name, config)
    return await client.key_value_table(scope, name)


def key(primary: bytes, secondary: bytes = b"") -> TableKey:
    return TableKey(primary, secondary)


async def populate(table: KeyValueTable, primaries, secondaries) -> dict[TableKey, bytes]:
    """One entry per (primary, secondary): each family written in one atomic batch."""
    written = {}
    for primary in primaries:
        changes = [Put(key(primary, secondary), primary + b"/" + secondary) for secondary in secondaries]
        versions = await table.update(changes)
        assert len(versions) == len(changes)
        written.update({change.key: change.value for change in changes})
    return written


# ---------------------------------------------------------------------- management


async def test_create_list_open_and_delete_tables(client):
    """Creating an existing table returns False, listing shows the tables, opening reads the configuration and
    the partitions (fixed-key-length table segments), deleting removes the partitions too."""
    scope = "kvt-admin"
    await client.create_scope(scope)
    config = KeyValueTableConfiguration(partition_count=4, primary_key_length=8, secondary_key_length=4,
                                        rollover_size_bytes=1 << 20)
    assert await client.create_key_value_table(scope, "orders", config)
    assert not await client.create_key_value_table(scope, "orders", KeyValueTableConfiguration(1, 1))  # exists
    assert await client.create_key_value_table(scope, "users", KeyValueTableConfiguration(1, 16))
    assert sorted([name async for name in client.list_key_value_tables(scope)]) == ["orders", "users"]

    table = await client.key_value_table(scope, "orders")
    assert table.config == config and (table.scope, table.name) == (scope, "orders")
    names = [naming.table_segment_name(scope, "orders", n) for n in range(4)]
    for name in names:
        assert (await client.segment_store.table_info(name)).key_length == 12

    with pytest.raises(ScopeNotEmpty):
        await client.delete_scope(scope)
    assert await client.delete_key_value_table(scope, "orders")
    assert not await client.delete_key_value_table(scope, "orders")
    for name in names:
        with pytest.raises(NoSuchSegment):
            await client.segment_store.table_info(name)
    with pytest.raises(KeyValueTableNotFound):
        await client.key_value_table(scope, "orders")
    with pytest.raises(KeyValueTableNotFound):  # a handle of a deleted table
        await table.get(key(b"12345678", b"abcd"))
    assert [name async for name in client.list_key_value_tables(scope)] == ["users"]
    assert await client.delete_key_value_table(scope, "users")
    assert await client.delete_scope(scope)


async def test_management_errors(client):
    await client.create_scope("kvt-admin-errors")
    with pytest.raises(ScopeNotFound):
        await client.create_key_value_table("kvt-no-such-scope", "t", FAMILIES)
    with pytest.raises(ScopeNotFound):
        [name async for name in client.list_key_value_tables("kvt-no-such-scope")]
    for bad in ("", "has space", "_underscore", "x" * 251):
        with pytest.raises(InvalidArgument):
            await client.create_key_value_table("kvt-admin-errors", bad, FAMILIES)
    with pytest.raises(InvalidArgument):
        await client.key_value_table("kvt admin", "t")
    with pytest.raises(InvalidArgument):  # the controller's bound on partitions
        await client.create_key_value_table("kvt-admin-errors", "huge", KeyValueTableConfiguration(10_001, 4))
    with pytest.raises(InvalidArgument):
        await client.create_key_value_table("kvt-admin-errors", "t", {"partition_count": 1})
    with pytest.raises(KeyValueTableNotFound):
        await client.key_value_table("kvt-admin-errors", "missing")
    assert [name async for name in client.list_key_value_tables("kvt-admin-errors")] == []


# ---------------------------------------------------------------------- single keys


async def test_get_put_insert_replace_and_remove_by_version(client):
    table = await new_table(client, "kvt-single")
    k = key(b"pk", b"s1")
    assert await table.get(k) is None and not await table.exists(k)
    v1 = await table.put_if_absent(k, b"one")
    assert await table.get(k) == TableEntry(k, b"one", v1) and await table.exists(k)
    with pytest.raises(BadKeyVersion):                       # it exists now
        await table.put_if_absent(k, b"again")
    v2 = await table.replace(k, b"two", v1)
    assert v2 != v1 and (await table.get(k)).value == b"two"
    with pytest.raises(BadKeyVersion) as stale:             # v1 is gone: someone replaced it
        await table.replace(k, b"late", v1)
    assert isinstance(stale.value, ConditionalTableUpdateError)
    v3 = await table.put(k, b"three")                        # unconditional
    with pytest.raises(BadKeyVersion):
        await table.remove(k, v2)
    await table.remove(k, v3)
    assert await table.get(k) is None
    with pytest.raises(NoSuchKey):                           # a version of a key that is gone
        await table.replace(k, b"four", v3)
    with pytest.raises(NoSuchKey):
        await table.remove(k, v3)
    await table.remove(k)                                    # unconditional: an absent key is no error
    assert await table.put(k, b"back") != v3
    assert (await table.get(k)).value == b"back"

    v_insert = await table.update([Put(key(b"pk", b"s2"), b"x", Version.NOT_EXISTS)])  # Put at NOT_EXISTS: an insert
    with pytest.raises(BadKeyVersion):
        await table.update([Put(key(b"pk", b"s2"), b"y", Version.NOT_EXISTS)])
    assert (await table.get(key(b"pk", b"s2"))).version == v_insert[0]
    assert await table.update([]) == []
    with pytest.raises(InvalidArgument):
        await table.replace(k, b"v", None)
    assert Version.from_text(v3.as_text()) == v3


async def test_get_all_returns_entries_in_the_order_asked(client):
    table = await new_table(client, "kvt-get-all")
    primaries = [bytes([65 + n, 48 + n]) for n in range(12)]
    written = await populate(table, primaries, [b"x1", b"x2", b"x3"])   # 36 keys over 3 partitions
    asked = [*reversed(written), key(b"no", b"pe"), *written]             # more than one read per partition
    found = await table.get_all(asked)
    assert [entry and entry.value for entry in found] == [*(written[k] for k in reversed(written)), None,
                                                          *written.values()]
    assert all(entry is None or entry.key == asked_key for entry, asked_key in zip(found, asked, strict=True))
    partitions = {entry.version.segment_id for entry in found if entry}
    assert len(partitions) == 3                                           # the families are spread


async def test_a_version_of_another_partition_never_matches(client):
    table = await new_table(client, "kvt-foreign-version")
    versions = {}
    for n in range(40):                                                   # find keys of two partitions
        k = key(bytes([n, n]), b"ss")
        version = await table.put(k, b"v")
        versions[version.segment_id] = (k, await table.get(k))
        if len(versions) == 2:
            break
    (k1, e1), (k2, e2) = versions.values()
    with pytest.raises(BadKeyVersion):
        await table.replace(k1, b"w", e2.version)
    with pytest.raises(BadKeyVersion):
        await table.remove(k2, e1.version)
    assert (await table.get(k1)).value == (await table.get(k2)).value == b"v"


async def test_a_table_with_primary_keys_only(client):
    table = await new_table(client, "kvt-primary-only", config=KeyValueTableConfiguration(2, 4))
    versions = [await table.put(key(b"k%03d" % n), b"%d" % n) for n in range(20)]
    assert [entry.value for entry in await table.get_all([key(b"k%03d" % n) for n in range(20)])] == \
        [b"%d" % n for n in range(20)]
    assert [k.primary async for k in table.iterator(max_per_page=7).all().keys()] == [b"k%03d" % n for n in range(20)]
    assert [k.primary async for k in table.iterator().for_prefix(b"k01").keys()] == \
        [b"k%03d" % n for n in range(10, 20)]
    assert [e.version async for e in table.iterator().for_primary_key(b"k005").entries()] == [versions[5]]
    with pytest.raises(InvalidArgument, match="no secondary keys"):
        await table.put(key(b"k000", b"x"), b"v")
    with pytest.raises(InvalidArgument):
        table.iterator().for_primary_key(b"k000", secondary_prefix=b"x")


# ---------------------------------------------------------------------- atomic batches of one key family


async def test_a_key_family_changes_atomically(client):
    table = await new_table(client, "kvt-batches")
    a, b, c = key(b"fm", b"aa"), key(b"fm", b"bb"), key(b"fm", b"cc")
    va, vb = await table.update([Insert(a, b"a1"), Put(b, b"b1")])
    assert (await table.get(a)).version == va and (await table.get(b)).version == vb

    before = await table.get_all([a, b, c])
    failing = [
        ([Put(a, b"a2", va), Put(b, b"b2", va), Insert(c, b"c2")], BadKeyVersion),   # b is not at va
        ([Put(a, b"a2", va), Insert(b, b"b2")], BadKeyVersion),                         # b exists
        ([Put(a, b"a2", va), Put(c, b"c2", vb)], NoSuchKey),                            # c does not exist
        ([Remove(a, va), Remove(b, va)], BadKeyVersion),
        ([Remove(a, va), Remove(c, vb)], NoSuchKey),
    ]
    for changes, error in failing:
        with pytest.raises(error):
            await table.update(changes)
        assert await table.get_all([a, b, c]) == before, f"{changes} changed something"

    va2, vb2, vc2 = await table.update([Put(a, b"a2", va), Put(b, b"b2", vb), Insert(c, b"c2")])
    assert [e.value for e in await table.get_all([a, b, c])] == [b"a2", b"b2", b"c2"]
    assert [e.version for e in await table.get_all([a, b, c])] == [va2, vb2, vc2]
    assert await table.update([Remove(a, va2), Remove(b), Remove(c, vc2)]) == []
    assert await table.get_all([a, b, c]) == [None, None, None]


async def test_batches_that_cannot_be_atomic_are_refused(client):
    table = await new_table(client, "kvt-bad-batches")
    a, b = key(b"fm", b"aa"), key(b"fm", b"bb")
    await table.put(a, b"a")
    for changes, message in [
        ([Put(a, b"x"), Put(key(b"zz", b"aa"), b"y")], "one primary key"),
        ([Put(a, b"x"), Remove(b)], "mix removals"),
        ([Remove(b), Insert(a, b"y")], "mix removals"),
        ([Put(a, b"x"), Put(a, b"y")], "at most once"),
        (["not a change"], "Insert, Put or Remove"),
    ]:
        with pytest.raises(InvalidArgument, match=message):
            await table.update(changes)
    huge = b"x" * MAX_TABLE_VALUE_LENGTH
    with pytest.raises(InvalidArgument, match="too large for one request"):
        await table.update([Put(key(b"fm", bytes([0, n])), huge) for n in range(17)])
    assert [entry.value async for entry in table.iterator().all().entries()] == [b"a"]   # nothing else changed


# ---------------------------------------------------------------------- key lengths


async def test_keys_and_values_of_the_wrong_size_are_refused_on_the_client(client):
    table = await new_table(client, "kvt-lengths")
    good = key(b"pk", b"sk")
    for bad in (key(b"p", b"sk"), key(b"pk1", b"sk"), key(b"pk", b""), key(b"pk", b"sk2")):
        for call in (table.get(bad), table.exists(bad), table.put(bad, b"v"), table.put_if_absent(bad, b"v"),
                     table.remove(bad), table.get_all([good, bad])):
            with pytest.raises(InvalidArgument, match="bytes long"):
                await call
    with pytest.raises(InvalidArgument, match="at most"):
        await table.put(good, b"v" * (MAX_TABLE_VALUE_LENGTH + 1))
    with pytest.raises(InvalidArgument, match="must be bytes"):
        await table.put(good, "text")
    builder = table.iterator()
    for make in (lambda: builder.for_primary_key(b"p"), lambda: builder.for_primary_key(b"pk", b"s", None),
                 lambda: builder.for_primary_key(b"pk", None, b"sk1"),
                 lambda: builder.for_primary_key(b"pk", secondary_prefix=b"sk1"),
                 lambda: builder.for_primary_key(b"pk", b"sk", secondary_prefix=b"s"),
                 lambda: builder.for_range(b"p", None), lambda: builder.for_range(None, b"pk1"),
                 lambda: builder.for_prefix(b"pk1"), lambda: table.iterator(max_per_page=0)):
        with pytest.raises(InvalidArgument):
            make()
    assert await table.get(good) is None


# ---------------------------------------------------------------------- iteration


async def test_iteration_over_families_ranges_prefixes_and_everything(client):
    table = await new_table(client, "kvt-iteration")
    primaries = [b"aa", b"ab", b"ac", b"ba", b"bb", b"c\x00", b"c\xff", b"zz"]
    secondaries = [b"\x00\x00", b"\x00\x01", b"\x01\x00", b"\x7f\xff", b"\xff\x00", b"\xff\xff"]
    written = await populate(table, primaries, secondaries)
    everything = sorted(written)

    async def keys(iterator) -> list[TableKey]:
        return [k async for k in iterator.keys()]

    for page_size in (1, 4, 100):
        builder = table.iterator(max_per_page=page_size)
        # all: every partition, merged into key order over the whole table
        assert await keys(builder.all()) == everything
        entries = [e async for e in builder.all().entries()]
        assert [(e.key, e.value) for e in entries] == [(k, written[k]) for k in everything]
        assert all(e == TableEntry(e.key, e.value, e.version) for e in entries)
        pages = [page async for page in builder.all().keys().pages()]
        assert all(0 < len(page) <= page_size for page in pages) and sum(pages, []) == everything
        # one key family: all of it, a secondary range, a secondary prefix
        assert await keys(builder.for_primary_key(b"bb")) == [k for k in everything if k.primary == b"bb"]
        assert await keys(builder.for_primary_key(b"bb", b"\x00\x01", b"\x7f\xff")) == \
            [key(b"bb", s) for s in secondaries[1:4]]
        assert await keys(builder.for_primary_key(b"bb", from_secondary=b"\x01\x00")) == \
            [key(b"bb", s) for s in secondaries[2:]]
        assert await keys(builder.for_primary_key(b"bb", to_secondary=b"\x00\xff")) == \
            [key(b"bb", s) for s in secondaries[:2]]
        assert await keys(builder.for_primary_key(b"bb", secondary_prefix=b"\xff")) == \
            [key(b"bb", s) for s in secondaries[4:]]
        assert await keys(builder.for_primary_key(b"bb", secondary_prefix=b"")) == \
            [key(b"bb", s) for s in secondaries]
        assert await keys(builder.for_primary_key(b"xx")) == []
        # primary ranges and prefixes: every partition
        assert await keys(builder.for_range(b"ab", b"bb")) == [k for k in everything if b"ab" <= k.primary <= b"bb"]
        assert await keys(builder.for_range(b"c\x01", None)) == [k for k in everything if k.primary >= b"c\x01"]
        assert await keys(builder.for_range(None, b"ab")) == [k for k in everything if k.primary <= b"ab"]
        assert await keys(builder.for_range(b"zz", b"aa")) == []
        assert await keys(builder.for_prefix(b"c")) == [k for k in everything if k.primary.startswith(b"c")]
        assert await keys(builder.for_prefix(b"ab")) == [k for k in everything if k.primary == b"ab"]
        assert await keys(builder.for_prefix(b"")) == await keys(builder.for_prefix(None)) == everything
        assert await keys(builder.for_prefix(b"d")) == []

    items = table.iterator().all().keys()        # each iteration starts afresh
    assert [k async for k in items] == [k async for k in items] == everything


async def test_a_key_family_is_read_from_its_partition_only(client):
    """With every other partition gone, a family's iteration still works; iterating everything does not."""
    table = await new_table(client, "kvt-one-partition")
    await populate(table, [b"aa", b"bb", b"cc", b"dd", b"ee", b"ff"], [b"xx", b"yy"])
    home = (await table.get(key(b"cc", b"xx"))).version.segment_id
    for partition in range(FAMILIES.partition_count):
        if partition != home:
            assert await client.segment_store.delete_table(naming.table_segment_name("kvt-one-partition", "t",
                                                                                     partition))
    assert [k async for k in table.iterator().for_primary_key(b"cc").keys()] == [key(b"cc", b"xx"), key(b"cc", b"yy")]
    with pytest.raises(KeyValueTableNotFound):
        [k async for k in table.iterator().all().keys()]


async def test_a_closed_handle_refuses_calls(standalone):
    async with tributary.connect(standalone.controller_uri) as client:
        table = await new_table(client, "kvt-closed")
        async with table:
            await table.put(key(b"aa", b"bb"), b"v")
        with pytest.raises(ClosedError):
            await table.get(key(b"aa", b"bb"))
        other = await client.key_value_table("kvt-closed", "t")
        items = other.iterator().all().keys()
    with pytest.raises(ClosedError):                 # closing the client closed it
        await other.put(key(b"aa", b"bb"), b"w")
    with pytest.raises(ClosedError):
        [k async for k in items]


# ---------------------------------------------------------------------- concurrency


async def test_concurrent_conditional_updates_have_exactly_one_winner_per_version(client, standalone):
    """Eight tasks (on two clients) increment one counter by read-then-replace: every version is replaced
    by exactly one of them, the winners' changes form one chain of versions, and the final value counts
    every win."""
    table = await new_table(client, "kvt-race", config=KeyValueTableConfiguration(2, 8))
    counter = key(b"counter!")
    start = await table.put(counter, b"0")
    wins: list[tuple[Version, Version]] = []   # (replaced version, new version) of every winner
    losses = collections.Counter()

    async def increment(table: KeyValueTable, task: int, times: int) -> None:
        done = 0
        while done < times:
            entry = await table.get(counter)
            await asyncio.sleep(0)           # let the others read the same version
            try:
                new = await table.replace(counter, b"%d" % (int(entry.value) + 1), entry.version)
            except BadKeyVersion:
                losses[task] += 1
                continue
            wins.append((entry.version, new))
            done += 1

    async with tributary.connect(standalone.controller_uri) as second:
        other = await second.key_value_table("kvt-race", "t")
        await asyncio.gather(*(increment(table if task % 2 else other, task, 12) for task in range(8)))
    final = await table.get(counter)
    assert int(final.value) == len(wins) == 8 * 12
    replaced = [old for old, _ in wins]
    assert len(set(replaced)) == len(replaced)                 # one winner per version
    chain = dict(wins)
    version, steps = start, 0
    while version in chain:
        version, steps = chain[version], steps + 1
    assert version == final.version and steps == len(wins)     # the wins are one chain from start to end
    assert sum(losses.values()) > 0                            # they did race


# ---------------------------------------------------------------------- a model


PRIMARIES = [b"aa", b"ab", b"ba", b"zz"]
SECONDARIES = [b"\x00", b"\x7f", b"\xff"]
MODEL_CONFIG = KeyValueTableConfiguration(partition_count=3, primary_key_length=2, secondary_key_length=1)
KEYS = st.builds(TableKey, st.sampled_from(PRIMARIES), st.sampled_from(SECONDARIES))
VALUES = st.binary(max_size=6)
CONDITIONS = st.sampled_from(["none", "absent", "current", "stale"])


class TableMachine(RuleBasedStateMachine):
    """A fresh table per example, held to a dict of key -> (value, version) over every operation."""

    def __init__(self, runner: asyncio.Runner, client, number: int):
        super().__init__()
        self.run = runner.run
        self.client = client
        self.name = f"m{number}"
        self.run(client.create_key_value_table("kvt-model", self.name, MODEL_CONFIG))
        self.table = self.run(client.key_value_table("kvt-model", self.name))
        self.model: dict[TableKey, tuple[bytes, Version]] = {}
        self.history: dict[TableKey, list[Version]] = collections.defaultdict(list)  # every version a key had

    def teardown(self):
        self.run(self.client.delete_key_value_table("kvt-model", self.name))
        self.run(self.table.close())

    def _set(self, k: TableKey, value: bytes, version: Version) -> None:
        assert version not in self.history[k]
        self.model[k] = (value, version)
        self.history[k].append(version)

    def _version(self, k: TableKey, condition: str, pick: int) -> Version | None:
        """The version a change is conditioned on: none, absent, the current one, or an older one."""
        if condition == "none":
            return None
        if condition == "absent":
            return Version.NOT_EXISTS
        current = self.model.get(k, (None, None))[1]
        if condition == "current" and current is not None:
            return current
        older = [version for version in self.history[k] if version != current]
        return older[pick % len(older)] if older else Version.NOT_EXISTS

    def _outcome(self, conditions: list[tuple[TableKey, Version | None]]) -> type[Exception] | None:
        """The error the segment store answers a batch with these conditions (None: it succeeds)."""
        if any(v is not None and v != Version.NOT_EXISTS and k not in self.model for k, v in conditions):
            return NoSuchKey
        if any(v == Version.NOT_EXISTS and k in self.model for k, v in conditions) or any(
                v is not None and v != Version.NOT_EXISTS and k in self.model and self.model[k][1] != v
                for k, v in conditions):
            return BadKeyVersion
        return None

    def _attempt(self, call, expected: type[Exception] | None):
        if expected is None:
            return self.run(call)
        try:
            self.run(call)
        except expected:
            return None
        raise AssertionError(f"expected {expected.__name__}")

    @rule(k=KEYS, value=VALUES)
    def put(self, k, value):
        self._set(k, value, self.run(self.table.put(k, value)))

    @rule(k=KEYS, value=VALUES)
    def put_if_absent(self, k, value):
        expected = BadKeyVersion if k in self.model else None
        version = self._attempt(self.table.put_if_absent(k, value), expected)
        if expected is None:
            self._set(k, value, version)

    @rule(k=KEYS, value=VALUES, condition=st.sampled_from(["current", "stale"]), pick=st.integers(0, 7))
    def replace(self, k, value, condition, pick):
        version = self._version(k, condition, pick)
        if version == Version.NOT_EXISTS:
            return                                   # no version of this key yet
        expected = self._outcome([(k, version)])
        new = self._attempt(self.table.replace(k, value, version), expected)
        if expected is None:
            self._set(k, value, new)

    @rule(k=KEYS, condition=CONDITIONS, pick=st.integers(0, 7))
    def remove(self, k, condition, pick):
        version = self._version(k, condition, pick)
        expected = self._outcome([(k, version)])
        self._attempt(self.table.remove(k, version), expected)
        if expected is None:
            self.model.pop(k, None)

    @rule(primary=st.sampled_from(PRIMARIES), data=st.data())
    def update_family(self, primary, data):
        secondaries = data.draw(st.lists(st.sampled_from(SECONDARIES), min_size=1, max_size=3, unique=True))
        removal = data.draw(st.booleans())
        changes, conditions = [], []
        for secondary in secondaries:
            k = key(primary, secondary)
            version = self._version(k, data.draw(CONDITIONS), data.draw(st.integers(0, 7)))
            conditions.append((k, version))
            changes.append(Remove(k, version) if removal else Put(k, data.draw(VALUES), version))
        expected = self._outcome(conditions)
        versions = self._attempt(self.table.update(changes), expected)
        if expected is None:
            for index, change in enumerate(changes):
                if removal:
                    self.model.pop(change.key, None)
                else:
                    self._set(change.key, change.value, versions[index])

    @rule(k=KEYS)
    def get(self, k):
        entry = self.run(self.table.get(k))
        expected = self.model.get(k)
        assert (None if entry is None else (entry.value, entry.version)) == expected
        assert self.run(self.table.exists(k)) == (expected is not None)

    @rule(keys=st.lists(KEYS, max_size=6))
    def get_all(self, keys):
        found = self.run(self.table.get_all(keys))
        assert [None if e is None else (e.key, e.value, e.version) for e in found] == \
            [None if k not in self.model else (k, *self.model[k]) for k in keys]

    @rule(how=st.sampled_from(["all", "family", "secondary range", "primary range", "prefix"]),
          page=st.integers(1, 5), a=st.sampled_from(PRIMARIES + [b"a\x00", b"b"]),
          low=st.sampled_from(SECONDARIES), high=st.sampled_from(SECONDARIES))
    def iterate(self, how, page, a, low, high):
        builder = self.table.iterator(max_per_page=page)
        primary = a.ljust(2, b"\x00")
        if how == "all":
            iterator, wanted = builder.all(), lambda k: True
        elif how == "family":
            iterator, wanted = builder.for_primary_key(primary), lambda k: k.primary == primary
        elif how == "secondary range":
            iterator = builder.for_primary_key(primary, low, high)
            wanted = lambda k: k.primary == primary and low <= k.secondary <= high  # noqa: E731
        elif how == "primary range":
            iterator, wanted = builder.for_range(primary, b"b\xff"), lambda k: primary <= k.primary <= b"b\xff"
        else:
            iterator, wanted = builder.for_prefix(a[:1]), lambda k: k.primary.startswith(a[:1])

        async def collect():
            return [page async for page in iterator.entries().pages()]

        pages = self.run(collect())
        assert all(0 < len(p) <= page for p in pages)
        assert [(e.key, e.value, e.version) for p in pages for e in p] == \
            [(k, *self.model[k]) for k in sorted(self.model) if wanted(k)]


def test_a_table_behaves_like_a_dict(standalone):
    """Random sequences of put / insert / replace / remove / family batches / get / iterate, each on a fresh
    table of 3 partitions, against a dict."""
    numbers = itertools.count()
    with asyncio.Runner() as runner:
        client = runner.run(_connected(standalone.controller_uri))
        try:
            runner.run(client.create_scope("kvt-model"))
            run_state_machine_as_test(lambda: TableMachine(runner, client, next(numbers)), settings=settings(
                max_examples=100, stateful_step_count=30, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
        finally:
            runner.run(client.close())


async def _connected(uri: str):
    return await tributary.connect(uri).__aenter__()
