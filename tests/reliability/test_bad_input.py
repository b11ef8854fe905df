"""Bad input and bad databases.

* Valid items (any unicode, NUL, lone surrogates, emoji, long strings, deep nesting,
  big numbers) round-trip EXACTLY (types included) through commit and a fresh store.
* Invalid items (sets, bytes, NaN/Infinity, objects, non-str keys, cycles, too deep)
  raise InvalidItemError (a TypeError) naming the index and type, and stage nothing.
* A read-only, full or unreachable database gives a clear error and loses no staged
  change; once the database is writable again one commit applies it exactly once.
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import math
import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessions import RetryPolicy, SQLiteStore
from sessions.errors import CommitError, InvalidItemError, SessionError, StorageError
from tests.provision import PROVISIONS

from .harness import PG_DSN, Db, new_db, open_url, pg_execute, with_query
from .pgproxy import PgProxy

KINDS = ["sqlite", "postgres"]
SPECIAL = [
    "",
    "\u0000",
    "a\u0000b",
    "\ud800",
    "\udfff",
    "x\udbff\udc00y",  # a valid pair written as two code points
    "\U0001f600",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467",
    "\u202eRTL",
    "\ufeff",
    "\r\n\t\\\"'",
    "\x7f\x1b[31m",
    "é" * 3,
    "\U0010ffff",
]


def strict_equal(a: Any, b: Any) -> bool:
    """Equal values of identical types (1 != 1.0, -0.0 != 0.0, lists stay lists).

    Iterative, so that items nested hundreds of levels deep compare fine."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, float):
            if math.copysign(1, x) != math.copysign(1, y) or x != y:
                return False
        elif isinstance(x, dict):
            if list(x) != list(y):
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif isinstance(x, list):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif x != y:
            return False
    return True


def has_surrogate(value: Any) -> bool:
    """Whether any string (key or value) in ``value`` holds a surrogate code point."""
    stack = [value]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            if any("\ud800" <= ch <= "\udfff" for ch in x):
                return True
        elif isinstance(x, dict):
            stack.extend(x)
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return False


any_char = st.characters(codec=None, exclude_categories=())  # surrogates included
clean_char = st.characters(codec=None)  # every code point but surrogates


def json_items(chars: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    text = st.one_of(st.text(chars, max_size=20), st.sampled_from(SPECIAL))
    scalar = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        text,
    )
    value = st.recursive(
        scalar,
        lambda children: st.one_of(
            st.lists(children, max_size=4), st.dictionaries(text, children, max_size=4)
        ),
        max_leaves=25,
    )
    return st.dictionaries(text, value, max_size=6)


# Items that may hold lone surrogates (the store must refuse those or keep them exact)
# and items that certainly are valid JSON text.
item = json_items(any_char)
valid_item = json_items(clean_char).filter(lambda x: not has_surrogate(x))
value = st.recursive(
    st.one_of(st.none(), st.integers(), st.text(clean_char, max_size=5)),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.text(clean_char, max_size=3), children, max_size=3),
    ),
    max_leaves=6,
)
text = st.text(clean_char, max_size=8)


class Opaque:
    pass


bad_leaf = st.one_of(
    st.sets(st.integers(), max_size=2),
    st.frozensets(st.integers(), max_size=2),
    st.binary(max_size=4),
    st.just(bytearray(b"x")),
    st.sampled_from([float("nan"), float("inf"), float("-inf")]),
    st.builds(Opaque),
    st.just(object()),
    st.just(1 + 2j),
    st.just(decimal.Decimal("1.5")),
    st.just(datetime.datetime(2024, 1, 1)),
)
bad_key = st.one_of(
    st.integers(), st.booleans(), st.none(), st.floats(allow_nan=False), st.tuples(st.integers())
)
# A bad leaf or a bad key somewhere inside an otherwise valid item.
bad_inside = st.recursive(
    st.one_of(
        bad_leaf.map(lambda v: {"bad": v}),
        st.tuples(bad_key, value).map(lambda kv: {kv[0]: kv[1]}),
    ),
    lambda children: st.one_of(
        st.tuples(text, children).map(lambda kv: {kv[0]: kv[1]}),
        st.tuples(text, children).map(lambda kv: {kv[0]: [kv[1]]}),
    ),
    max_leaves=4,
)
not_a_dict = st.one_of(
    st.lists(st.integers(), max_size=2), st.text(max_size=3), st.integers(), st.none(), bad_leaf
)
# A lone surrogate somewhere in an otherwise valid item: not valid Unicode text.
surrogate_inside = st.sampled_from(["\ud800", "a\udfffb", "\ud83d\ude00"]).flatmap(
    lambda bad: st.sampled_from([{"k": bad}, {bad: 1}, {"k": [1, {"x": bad}]}])
)


def require(kind: str) -> None:
    PROVISIONS[kind].require()


@pytest.fixture(params=KINDS)
def loop_db(
    request: pytest.FixtureRequest, tmp_path: Any
) -> Iterator[tuple[asyncio.AbstractEventLoop, Db]]:
    """A database and an event loop of our own (hypothesis drives sync functions)."""
    require(request.param)
    loop = asyncio.new_event_loop()
    db = new_db(request.param, str(tmp_path))
    try:
        yield loop, db
    finally:
        loop.run_until_complete(db.drop())
        loop.close()


HYPO = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


def test_valid_items_round_trip_exactly_through_a_fresh_store(loop_db: Any) -> None:
    loop, db = loop_db
    writer = loop.run_until_complete(db.open())

    async def round_trip(items: list[dict[str, Any]]) -> None:
        sid = f"rt-{uuid.uuid4().hex}"
        s = writer.session(sid)
        try:
            await s.add_items(items)
        except InvalidItemError:
            # Text with lone surrogates is not valid Unicode: refused (and nothing
            # staged). Everything else must be accepted.
            assert has_surrogate(items), "a valid item was refused"
            assert not s.has_pending
            await s.close()
            return
        assert not has_surrogate(items), (
            "text with lone surrogates was accepted (it cannot round-trip)"
        )
        assert all(strict_equal(a, b) for a, b in zip(await s.get_items(), items, strict=True))
        await s.commit()
        fresh = await open_url(db.url)
        try:
            got = await fresh.session(sid).get_items()
        finally:
            await fresh.close()
        assert len(got) == len(items)
        for i, (a, b) in enumerate(zip(got, items, strict=True)):
            assert strict_equal(a, b), (
                f"item {i} changed on the way through the database: {b!r:.200} -> {a!r:.200}"
            )
        await s.close()

    @HYPO
    @given(st.lists(item, min_size=1, max_size=4))
    def check(items: list[dict[str, Any]]) -> None:
        loop.run_until_complete(round_trip(items))

    check()
    # Fixed edge cases, always run: every special string as key and value, deep
    # nesting at the limit, huge numbers, a big item.
    deep: Any = "leaf"
    for level in range(490):  # the limit is 500 levels of nesting
        deep = {"d": deep} if level % 2 else [deep]
    clean = [x for x in SPECIAL if not has_surrogate(x)]
    fixed: list[dict[str, Any]] = [
        {x: x for x in clean},
        {"list": clean},
        {"deep": deep},
        {"int": 2**200, "neg": -(2**70), "f": 1e16, "tiny": 5e-324, "z": -0.0, "one": 1.0},
        {"big": "\U0001f600" * 1_000_000 + "\u0000" + "x" * 3_000_000},
    ]
    loop.run_until_complete(round_trip(fixed))
    for x in SPECIAL:  # one by one: those with lone surrogates must be refused
        loop.run_until_complete(round_trip([{x: x}]))


def test_invalid_items_are_refused_naming_index_and_type_and_stage_nothing(loop_db: Any) -> None:
    loop, db = loop_db
    store = loop.run_until_complete(db.open())

    async def refuse(prefix: list[dict[str, Any]], bad: Any, suffix: list[dict[str, Any]]) -> None:
        s = store.session(f"bad-{uuid.uuid4().hex}")
        try:
            await s.add_items([{"staged": "before"}])
            before = s.pending
            index = len(prefix)
            with pytest.raises(InvalidItemError) as info:
                await s.add_items([*prefix, bad, *suffix])
            err = info.value
            assert isinstance(err, TypeError)
            assert err.index == index, (
                f"InvalidItemError.index is {err.index}, the bad item is {index}: {err}"
            )
            assert err.item_type == type(bad).__name__
            assert f"item {index}" in str(err) and type(bad).__name__ in str(err), str(err)
            assert s.pending == before, f"a refused add_items staged something: {s.pending}"
            await s.commit()
            assert await s.get_items() == [{"staged": "before"}]
        finally:
            if s.has_pending:
                await s.rollback()
            await s.close()

    @HYPO
    @given(
        st.lists(valid_item, max_size=2),
        st.one_of(bad_inside, not_a_dict, surrogate_inside),
        st.lists(valid_item, max_size=2),
    )
    def check(prefix: list[dict[str, Any]], bad: Any, suffix: list[dict[str, Any]]) -> None:
        loop.run_until_complete(refuse(prefix, bad, suffix))

    check()
    cycle: dict[str, Any] = {"a": []}
    cycle["a"].append(cycle)
    too_deep: Any = {}
    for _ in range(600):
        too_deep = {"d": too_deep}
    for bad in (cycle, too_deep, {"k": {1, 2}}, {"nan": float("nan")}, {1: "x"}, {True: 1}):
        loop.run_until_complete(refuse([{"ok": 1}], bad, [{"ok": 2}]))


# --------------------------------------------------------------------------- bad databases


async def _judge_refused_commit(
    s: Any, stored: list[Any], staged: int, words: tuple[str, ...]
) -> CommitError:
    with pytest.raises(CommitError) as info:
        await s.commit()
    err = info.value
    message = str(err).lower()
    assert any(w in message for w in words), f"error does not say what is wrong: {err}"
    assert s.pending.items == staged, f"staged changes lost after a refused commit: {s.pending}"
    assert err.outcome_known, f"nothing can have been applied, yet outcome_known=False: {err}"
    return err


async def _sqlite_exec(store: SQLiteStore, sql: str) -> Any:
    return await store.sqlite.run(lambda conn: conn.execute(sql).fetchall())


async def _sqlite_two_attempts(path: Any) -> SQLiteStore:
    return await SQLiteStore.open(str(path), retry=RetryPolicy(attempts=2, initial_delay=0))


async def _one_committed(store: SQLiteStore) -> Any:
    """Session "s" of ``store`` with ``{"n": 0}`` committed."""
    s = store.session("s")
    await s.add_items([{"n": 0}])
    await s.commit()
    return s


async def test_sqlite_full_database_keeps_staged_changes(tmp_path: Any) -> None:
    store = await _sqlite_two_attempts(tmp_path / "full.db")
    try:
        s = await _one_committed(store)
        ((pages,),) = await _sqlite_exec(store, "PRAGMA page_count")
        await _sqlite_exec(store, f"PRAGMA max_page_count = {pages}")
        big = [{"blob": "x" * 200_000, "i": i} for i in range(3)]
        await s.add_items(big)
        await _judge_refused_commit(s, [{"n": 0}], 3, ("full",))
        check = await SQLiteStore.open(str(tmp_path / "full.db"))
        assert await check.session("s").get_items() == [{"n": 0}]
        await _sqlite_exec(store, "PRAGMA max_page_count = 1073741823")
        await s.commit()
        assert await check.session("s").get_items() == [{"n": 0}, *big]
        await check.close()
    finally:
        await store.close()


async def test_sqlite_read_only_database_keeps_staged_changes(tmp_path: Any) -> None:
    """``PRAGMA query_only`` makes SQLite refuse every write on the store's connection."""
    store = await _sqlite_two_attempts(tmp_path / "ro.db")
    try:
        s = await _one_committed(store)
        await _sqlite_exec(store, "PRAGMA query_only = ON")
        await s.add_items([{"n": 1}])
        await s.pop_item()  # pops the staged one: the pop of a staged item is local
        await s.pop_item()  # pops {"n": 0}: a staged pop of stored history
        await s.add_items([{"n": 2}])
        before = s.pending
        with pytest.raises(CommitError) as info:
            await s.commit()
        assert "readonly" in str(info.value).lower() or "read-only" in str(info.value).lower(), (
            info.value
        )
        assert info.value.outcome_known
        assert s.pending == before
        assert await s.get_items() == [{"n": 2}]
        await _sqlite_exec(store, "PRAGMA query_only = OFF")
        await s.commit()
        fresh = await SQLiteStore.open(str(tmp_path / "ro.db"))
        assert await fresh.session("s").get_items() == [{"n": 2}]
        await fresh.close()
    finally:
        await store.close()


def _immutable(paths: list[str], on: bool) -> bool:
    flag = "+i" if on else "-i"
    return subprocess.run(["chattr", flag, *paths], capture_output=True).returncode == 0


async def test_sqlite_read_only_file_gives_a_clear_error_at_open(tmp_path: Any) -> None:
    """A database file and directory nobody may write (``chmod``; as root, where
    permissions do not bind, ``chattr +i``): opening names the file and the reason."""
    path = str(tmp_path / "locked.db")
    store = await SQLiteStore.open(path)
    s = store.session("s")
    await s.add_items([{"n": 0}])
    await s.commit()
    await store.close()
    targets = [path, str(tmp_path)]
    if os.geteuid() == 0:
        if not _immutable(targets, True):
            pytest.skip("running as root and chattr +i is not available")
    else:
        os.chmod(path, 0o444)
        os.chmod(tmp_path, 0o555)
    try:
        try:
            store = await SQLiteStore.open(path)
        except StorageError as exc:
            assert path in str(exc), exc
            assert any(
                w in str(exc).lower()
                for w in ("readonly", "read-only", "unable to open", "permission")
            ), exc
        else:  # opened read-only: then a commit must be refused, keeping the change
            s = store.session("s")
            await s.add_items([{"n": 1}])
            with pytest.raises(CommitError):
                await s.commit()
            assert s.pending.items == 1
            await s.rollback()
            await store.close()
    finally:
        if os.geteuid() == 0:
            _immutable(targets, False)
        else:
            os.chmod(tmp_path, 0o755)
            os.chmod(path, 0o644)


async def test_sqlite_missing_directory_gives_a_clear_error(tmp_path: Any) -> None:
    path = str(tmp_path / "no" / "such" / "dir" / "x.db")
    with pytest.raises(StorageError) as info:
        await SQLiteStore.open(path)
    assert path in str(info.value)


def _closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


async def test_postgres_closed_port_gives_a_clear_error() -> None:
    require("postgres")
    from sessions.postgres import PostgresStore

    port = _closed_port()
    with pytest.raises(SessionError) as info:
        await PostgresStore.open(f"postgresql://postgres@127.0.0.1:{port}/postgres", min_size=1)
    assert str(port) in str(info.value), info.value


async def test_postgres_server_down_mid_life_keeps_staged_changes() -> None:
    require("postgres")
    db = new_db("postgres")
    proxy = await PgProxy().start()
    try:
        await (await db.open()).close()  # create the schema
        store = await open_url(
            with_query(proxy.dsn(), schema=db.pg_schema or ""),
            retry=RetryPolicy(attempts=2, initial_delay=0.01),
        )
        s = store.session("s")
        await s.add_items([{"n": 0}])
        await s.commit()
        await s.add_items([{"n": 1}])
        await s.pop_item()
        await s.add_items([{"n": 2}, {"n": 3}])
        before = s.pending
        proxy.go_down()
        with pytest.raises(CommitError) as info:
            await s.commit()
        assert (
            "connection" in str(info.value).lower() or "unavailable" in str(info.value).lower()
        ), info.value
        assert s.pending == before
        proxy.come_up()
        await s.commit()
        assert await s.get_items() == [{"n": 0}, {"n": 2}, {"n": 3}]
        await s.close()
        await store.close()
        fresh = await db.open()
        assert await fresh.session("s").get_items() == [{"n": 0}, {"n": 2}, {"n": 3}]
    finally:
        await proxy.close()
        await db.drop()


async def test_postgres_read_only_role_keeps_staged_changes() -> None:
    """A role whose write grants are revoked, then one with default_transaction_read_only."""
    require("postgres")
    db = new_db("postgres")
    role = f"txs_rel_ro_{uuid.uuid4().hex[:8]}"
    schema = db.pg_schema
    assert schema is not None
    await (await db.open()).close()  # create the schema as the owner
    await pg_execute(f'CREATE ROLE "{role}" LOGIN')
    grant = (
        f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"; '
        f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"'
    )
    for sql in grant.split("; "):
        await pg_execute(sql)
    role_dsn = PG_DSN.replace("postgres@", f"{role}@", 1)
    name = f"txs-rel-ro-{uuid.uuid4().hex[:6]}"
    store = await open_url(
        with_query(role_dsn, schema=schema),
        retry=RetryPolicy(attempts=2, initial_delay=0.01),
        server_settings={"application_name": name},
    )
    try:
        s = store.session("s")
        await s.add_items([{"n": 0}])
        await s.commit()
        await pg_execute(
            f'REVOKE INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{schema}" FROM "{role}"'
        )
        await s.add_items([{"n": 1}])
        await _judge_refused_commit(s, [{"n": 0}], 1, ("permission", "42501"))
        for sql in grant.split("; "):
            await pg_execute(sql)
        await pg_execute(f'ALTER ROLE "{role}" SET default_transaction_read_only = on')
        await store.pool.expire_connections()  # type: ignore[attr-defined]  # new connections pick up the role setting
        await _judge_refused_commit(s, [{"n": 0}], 1, ("read-only", "read only", "25006"))
        await pg_execute(f'ALTER ROLE "{role}" RESET default_transaction_read_only')
        await store.pool.expire_connections()  # type: ignore[attr-defined]
        await s.commit()
        assert await s.get_items() == [{"n": 0}, {"n": 1}]
        await s.close()
    finally:
        await store.close()
        await db.drop()
        await pg_execute(f'DROP OWNED BY "{role}"')
        await pg_execute(f'DROP ROLE "{role}"')
