"""``StoreOptions``: the store settings as one value (issue 29, "write each rule once").

Validated once, in its constructor, with the messages the keywords always gave; taken
as ``options=`` by every store kind, ``store.session()``, the sessions, the wrapper
and ``open_store(url)``, exactly equivalent to the keywords; a setting given both
ways is a ``TypeError`` naming it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from sessions import (
    MemoryBackend,
    MemorySession,
    MemoryStore,
    RetryPolicy,
    SQLiteSession,
    SQLiteStore,
    Store,
    StoreOptions,
    TransactionalSession,
    open_store,
)
from tests.conftest import PG_DSN, require_postgres

RETRY = RetryPolicy(attempts=2, initial_delay=0.01, max_delay=0.1)
#: Every setting away from its default.
SETTINGS: dict[str, Any] = {
    "retry": RETRY,
    "commit_timeout": 7.5,
    "ttl": timedelta(hours=3),
    "integrity": "reject",
}
SESSION_SETTINGS: dict[str, Any] = {"commit_timeout": 4.0, "integrity": "off"}

BAD: list[tuple[str, Any, type[Exception], str]] = [
    ("retry", 3, TypeError, "retry must be a RetryPolicy, got int"),
    ("commit_timeout", 0, ValueError, "commit_timeout must be > 0, got 0"),
    ("commit_timeout", -1.5, ValueError, "commit_timeout must be > 0, got -1.5"),
    ("commit_timeout", float("nan"), ValueError, "commit_timeout must be finite, got nan"),
    ("commit_timeout", "5", TypeError, "commit_timeout must be a number of seconds, got str"),
    ("commit_timeout", True, TypeError, "commit_timeout must be a number of seconds, got bool"),
    ("ttl", 60, TypeError, "ttl must be a timedelta or None, got int"),
    ("ttl", timedelta(0), ValueError, "ttl must be a positive time-to-live, got 0.0 seconds"),
    ("ttl", timedelta(days=40000), ValueError, "ttl must be at most 36525 days"),
    (
        "integrity",
        "strict",
        ValueError,
        "integrity must be one of 'reject', 'quarantine', 'off', got 'strict'",
    ),
]


def store_settings(store: Store[Any]) -> dict[str, Any]:
    return {name: getattr(store, name) for name in SETTINGS}


def session_settings(session: Any) -> dict[str, Any]:
    return {name: getattr(session, name) for name in SESSION_SETTINGS}


# ------------------------------------------------------------------------ the value


@pytest.mark.parametrize(("name", "value", "error", "text"), BAD)
def test_a_wrong_value_is_refused_when_the_options_are_made(
    name: str, value: Any, error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=re.escape(text)):
        StoreOptions(**{name: value})


@pytest.mark.parametrize(("name", "value", "error", "text"), BAD)
async def test_the_keywords_give_the_same_errors_as_before(
    name: str, value: Any, error: type[Exception], text: str, tmp_path: Path
) -> None:
    makers: list[Callable[[], Any]] = [
        lambda: MemoryStore(MemoryBackend(), **{name: value}),
        lambda: SQLiteStore.open(tmp_path / "x.db", **{name: value}),
    ]
    if name in SESSION_SETTINGS:
        makers.append(lambda: MemorySession("s", **{name: value}))
    for make in makers:
        with pytest.raises(error, match=re.escape(text)):
            made = make()
            if isinstance(made, Awaitable):
                await made
    assert not (tmp_path / "x.db").exists()  # refused before the database was opened


def test_the_options_are_frozen_and_say_what_they_set() -> None:
    options = StoreOptions(commit_timeout=5, integrity="off")
    assert options.commit_timeout == 5.0 and isinstance(options.commit_timeout, float)
    assert options.given() == ("commit_timeout", "integrity")
    assert StoreOptions().given() == ()
    assert StoreOptions(**SETTINGS).given() == tuple(SETTINGS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.integrity = "reject"  # type: ignore[misc]


async def test_options_must_be_store_options() -> None:
    with pytest.raises(TypeError, match="options must be a StoreOptions, got dict"):
        await MemoryStore.open(options={"commit_timeout": 5})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="options must be a StoreOptions, got dict"):
        MemorySession("s", options={"integrity": "off"})  # type: ignore[arg-type]


# -------------------------------------------------------- keywords and options: the same

Opener = Callable[..., Awaitable[Store[Any]]]


@pytest.fixture(params=["memory", "memory-init", "sqlite", "sqlite-init", "postgres", "pool"])
async def opener(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    """Opens stores of one kind (and one way), closing them afterwards."""
    opened: list[Store[Any]] = []
    kind = request.param
    pool: Any = None
    if kind in ("postgres", "pool"):
        require_postgres()
        schema = request.getfixturevalue("pg_schema")
    if kind == "pool":
        import asyncpg

        pool = await asyncpg.create_pool(PG_DSN, min_size=1, max_size=2)

    async def open_one(**settings: Any) -> Store[Any]:
        store: Store[Any]
        if kind == "memory":
            store = await MemoryStore.open(**settings)
        elif kind == "memory-init":
            store = MemoryStore(MemoryBackend(), **settings)
        elif kind == "sqlite":
            store = await SQLiteStore.open(tmp_path / "x.db", **settings)
        elif kind == "sqlite-init":
            probe = await SQLiteStore.open(tmp_path / "y.db")
            opened.append(probe)
            store = SQLiteStore(probe.sqlite, **settings)
        else:
            from sessions import PostgresStore

            if kind == "postgres":
                store = await PostgresStore.open(
                    PG_DSN, schema=schema, min_size=1, max_size=2, **settings
                )
            else:
                store = await PostgresStore.from_pool(pool, schema=schema, **settings)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        await store.close()
    if pool is not None:
        await pool.close()


async def test_every_store_kind_takes_options_as_it_takes_the_keywords(opener: Opener) -> None:
    by_keyword = await opener(**SETTINGS)
    by_options = await opener(options=StoreOptions(**SETTINGS))
    assert store_settings(by_keyword) == store_settings(by_options) == SETTINGS
    default = store_settings(await opener())
    assert store_settings(await opener(options=StoreOptions())) == default
    assert default == {
        "retry": RetryPolicy(),
        "commit_timeout": 30.0,
        "ttl": None,
        "integrity": "quarantine",
    }
    # Keywords and options may share the work, one setting each.
    mixed = await opener(
        retry=RETRY,
        ttl=SETTINGS["ttl"],
        options=StoreOptions(commit_timeout=7.5, integrity="reject"),
    )
    assert store_settings(mixed) == SETTINGS


async def test_a_setting_given_both_ways_is_a_type_error_naming_it(opener: Opener) -> None:
    options = StoreOptions(commit_timeout=5, integrity="off")
    with pytest.raises(TypeError, match="commit_timeout given both as a keyword and in options="):
        await opener(commit_timeout=5, options=options)
    with pytest.raises(TypeError, match="commit_timeout and integrity given both"):
        await opener(commit_timeout=6, integrity="off", ttl=timedelta(1), options=options)


async def test_sessions_of_a_store_take_options_as_they_take_the_keywords(
    opener: Opener,
) -> None:
    store = await opener(commit_timeout=9.0, integrity="reject")
    by_keyword = store.session("a", **SESSION_SETTINGS)
    by_options = store.session("a", options=StoreOptions(**SESSION_SETTINGS))
    assert session_settings(by_keyword) == session_settings(by_options) == SESSION_SETTINGS
    inherits = store.session("a", options=StoreOptions())
    assert session_settings(inherits) == {"commit_timeout": 9.0, "integrity": "reject"}
    borrowed = type(by_keyword)("a", store=store, options=StoreOptions(**SESSION_SETTINGS))
    assert session_settings(borrowed) == SESSION_SETTINGS
    with pytest.raises(TypeError, match="session\\(\\): integrity given both as a keyword"):
        store.session("a", integrity="off", options=StoreOptions(integrity="off"))
    with pytest.raises(TypeError, match="retry and ttl in options= belong to a store"):
        store.session("a", options=StoreOptions(retry=RETRY, ttl=timedelta(1)))


OneLiner = Callable[..., Any]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def one_liner(request: pytest.FixtureRequest, tmp_path: Path) -> OneLiner:
    """Makes sessions that own a store of their own."""
    if request.param == "memory":
        return lambda **settings: MemorySession("a", **settings)
    if request.param == "sqlite":
        return lambda **settings: SQLiteSession("a", tmp_path / "x.db", **settings)
    require_postgres()
    schema = request.getfixturevalue("pg_schema")
    from sessions import PostgresSession

    return lambda **settings: PostgresSession("a", PG_DSN, schema=schema, **settings)


async def test_every_one_liner_takes_options_as_it_takes_the_keywords(
    one_liner: OneLiner,
) -> None:
    name = ""
    for settings in ({**SESSION_SETTINGS}, {"options": StoreOptions(**SESSION_SETTINGS)}):
        session = one_liner(**settings)
        name = type(session).__name__
        try:
            assert session_settings(session) == SESSION_SETTINGS
            await session.get_items()  # opens its store, which gets the commit_timeout
            assert session.store.commit_timeout == 4.0
            assert session.store.integrity == "quarantine"  # the session's own wins
        finally:
            await session.close()
    with pytest.raises(TypeError, match=f"{name}: commit_timeout given both as a keyword"):
        one_liner(commit_timeout=1, options=StoreOptions(commit_timeout=1))
    with pytest.raises(TypeError, match=f"{name}: retry in options= belong to a store"):
        one_liner(options=StoreOptions(retry=RETRY))
    with pytest.raises(ValueError, match="integrity must be one of"):
        one_liner(integrity="strict")


# ------------------------------------------------------------------------ the wrapper


async def test_the_wrapper_takes_options_as_it_takes_the_keywords() -> None:
    inner = MemorySession("w")
    by_keyword = TransactionalSession(inner, **SESSION_SETTINGS)
    by_options = TransactionalSession(inner, options=StoreOptions(**SESSION_SETTINGS))
    for wrapper in (by_keyword, by_options):
        assert session_settings(wrapper) == SESSION_SETTINGS
        assert wrapper.store is not None and wrapper.store.commit_timeout == 4.0
    defaults = TransactionalSession(inner, options=StoreOptions())
    assert session_settings(defaults) == {"commit_timeout": 30.0, "integrity": "reject"}
    assert session_settings(TransactionalSession(inner)) == session_settings(defaults)
    with pytest.raises(ValueError, match="integrity='quarantine'"):
        TransactionalSession(inner, options=StoreOptions(integrity="quarantine"))
    with pytest.raises(TypeError, match="TransactionalSession: integrity given both"):
        TransactionalSession(inner, integrity="off", options=StoreOptions(integrity="off"))
    with pytest.raises(TypeError, match="TransactionalSession: retry in options= belong"):
        TransactionalSession(inner, options=StoreOptions(retry=RETRY))
    await inner.close()


# ------------------------------------------------------------------------ open_store


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'x.db'}"
    require_postgres()
    return f"{PG_DSN}?schema={request.getfixturevalue('pg_schema')}"


async def test_open_store_takes_options_over_the_url(url: str) -> None:
    in_url = f"{url}{'&' if '?' in url else '?'}ttl=100&integrity=reject"
    by_keyword = await open_store(in_url, **SETTINGS)
    by_options = await open_store(in_url, options=StoreOptions(**SETTINGS))
    from_url = await open_store(in_url, options=StoreOptions(commit_timeout=7.5))
    try:
        assert store_settings(by_keyword) == store_settings(by_options) == SETTINGS
        assert store_settings(from_url) == {
            "retry": RetryPolicy(),
            "commit_timeout": 7.5,
            "ttl": timedelta(seconds=100),
            "integrity": "reject",
        }
    finally:
        for store in (by_keyword, by_options, from_url):
            await store.close()
    with pytest.raises(TypeError, match="ttl given both as a keyword and in options="):
        await open_store(url, ttl=timedelta(1), options=StoreOptions(ttl=timedelta(2)))
