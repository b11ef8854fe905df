"""``open_store(url)``, URL parsing and password redaction."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from sessions import SQLiteStore, open_store
from sessions._model.redact import redact
from sessions._tools.url import parse_url
from sessions.errors import StorageError
from tests.conftest import PG_DSN, require_postgres

SECRET = "Sup3r-Secret_pw"


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///relative.db", "relative.db"),
        ("sqlite:///dir/sub.db", "dir/sub.db"),
        ("sqlite:////abs/path.db", "/abs/path.db"),
        ("sqlite:///my%20file.db", "my file.db"),
        ("sqlite://", ":memory:"),
        ("sqlite:///:memory:", ":memory:"),
        ("SQLITE:///x.db", "x.db"),
    ],
)
def test_sqlite_url_forms(url: str, path: str) -> None:
    parsed = parse_url(url)
    assert (parsed.kind, parsed.target, parsed.options) == ("sqlite", path, {})


def test_sqlite_url_options() -> None:
    parsed = parse_url("sqlite:///x.db?synchronous=normal&busy_timeout=2.5")
    assert parsed.options == {"synchronous": "NORMAL", "busy_timeout": 2.5}


def test_postgres_url_strips_our_parameters_only() -> None:
    url = f"postgresql://app:{SECRET}@db.internal:6432/app?schema=chat&table_prefix=t_&sslmode=disable"
    parsed = parse_url(url)
    assert parsed.kind == "postgres"
    assert parsed.options == {"schema": "chat", "table_prefix": "t_"}
    assert parsed.target == f"postgresql://app:{SECRET}@db.internal:6432/app?sslmode=disable"
    assert SECRET not in repr(parsed) and SECRET not in parsed.display
    for scheme in ("postgres", "postgresql+asyncpg"):
        assert parse_url(f"{scheme}://u@h/db").target.endswith("://u@h/db")
    assert parse_url("postgresql://u@h1:5432,h2:5433/db").kind == "postgres"


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("", "empty"),
        ("chat.db", "sqlite:///chat.db"),
        ("mysql://u@h/db", "unknown scheme 'mysql'"),
        ("sqlite://host/x.db", "no host"),
        ("sqlite:///x.db?journal=wal", "unknown SQLite parameter 'journal'"),
        ("sqlite:///x.db?synchronous=sometimes", "synchronous"),
        ("sqlite:///x.db?busy_timeout=-1", "busy_timeout"),
        (f"postgresql://u:{SECRET}@h:notaport/db", "port"),
        (f"postgresql://u:{SECRET}@h/db?schema=", "schema= is empty"),
        ("postgresql://", "no host"),
    ],
)
def test_bad_urls_raise_value_error_naming_the_problem(url: str, words: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_url(url)
    assert words in str(info.value)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(
    ("url", "parameter"),
    [
        ("sqlite:///x.db?ttl=100&ttl=200", "ttl"),
        ("sqlite:///x.db?ttl=100&ttl=100", "ttl"),
        ("sqlite:///x.db?synchronous=FULL&busy_timeout=1&synchronous=NORMAL", "synchronous"),
        ("sqlite:///x.db?integrity=off&integrity=reject", "integrity"),
        (f"postgresql://u:{SECRET}@h/db?ttl=100&ttl=200", "ttl"),
        (f"postgresql://u:{SECRET}@h/db?schema=a&schema=b", "schema"),
        (f"postgresql://u:{SECRET}@h/db?table_prefix=a_&table_prefix=b_", "table_prefix"),
        (f"postgresql://u:{SECRET}@h/db?sslmode=disable&sslmode=require", "sslmode"),
        (f"postgresql://u@h/db?password={SECRET}&password={SECRET}x", "password"),
    ],
)
def test_a_repeated_url_parameter_is_refused_naming_it_never_its_values(
    url: str, parameter: str
) -> None:
    with pytest.raises(ValueError, match=f"parameter '{parameter}' is given more than once"):
        parse_url(url)
    with pytest.raises(ValueError) as info:
        parse_url(url)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(
    "ttl", ["3155760001", "99999999999999", "1e300", "inf", "nan", "0", "-5", "soon"]
)
@pytest.mark.parametrize("base", ["sqlite:///x.db", f"postgresql://u:{SECRET}@h/db"])
def test_a_url_ttl_outside_0_to_100_years_is_a_value_error_naming_ttl(base: str, ttl: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_url(f"{base}?ttl={ttl}")
    assert "ttl must be a number of seconds > 0 and at most 3155760000 (100 years)" in str(
        info.value
    )
    assert SECRET not in str(info.value)
    assert parse_url(f"{base}?ttl=3155760000").options["ttl"].days == 36525


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"postgresql://app:{SECRET}@h:5432/db", "postgresql://app:***@h:5432/db"),
        (f"postgres://app:{SECRET}@h/db?schema=x", "postgres://app:***@h/db?schema=x"),
        ("postgresql://app:p%40ss%2Fw@h/db", "postgresql://app:***@h/db"),
        ("postgresql://app:p@ss@h/db", "postgresql://app:***@h/db"),  # unescaped '@'
        (f"postgresql://h/db?password={SECRET}&x=1", "postgresql://h/db?password=***&x=1"),
        ("postgresql://app@h/db", "postgresql://app@h/db"),
        ("sqlite:////tmp/a:b@c.db", "sqlite:////tmp/a:b@c.db"),
        ("not a url", "not a url"),
    ],
)
def test_redact_masks_the_password_of_a_url(url: str, expected: str) -> None:
    assert redact(url) == expected


def test_redact_masks_a_known_url_and_its_bare_password_in_any_text() -> None:
    url = f"postgresql://app:{SECRET}@h/db"
    text = f"connect to {url} failed: password {SECRET!r} rejected"
    cleaned = redact(text, [url])
    assert SECRET not in cleaned
    assert "postgresql://app:***@h/db" in cleaned
    encoded = "postgresql://app:a%2Fb%40c@h/db"
    assert "a/b@c" not in redact("bad password a/b@c", [encoded])


async def test_open_store_sqlite_file_memory_and_missing(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = await open_store(f"sqlite:///{path}")
    try:
        assert isinstance(store, SQLiteStore) and store.path == str(path)
        session = store.session("a")
        await session.add_items([{"role": "user", "content": "hi"}])
        await session.commit()
    finally:
        await store.close()
    again = await open_store(f"sqlite:///{path}", create=False)
    try:
        assert await again.session("a").get_items() == [{"role": "user", "content": "hi"}]
    finally:
        await again.close()

    memory = await open_store("sqlite://")
    try:
        assert isinstance(memory, SQLiteStore) and memory.path == ":memory:"
    finally:
        await memory.close()

    missing = tmp_path / "missing.db"
    with pytest.raises(FileNotFoundError, match="does not exist"):
        await open_store(f"sqlite:///{missing}", create=False)
    assert not missing.exists()
    with pytest.raises(StorageError, match="cannot open SQLite database"):
        await open_store(f"sqlite:///{tmp_path}/no/such/dir/x.db")


async def test_open_store_postgres_schema_and_prefix(pg_schema: str) -> None:
    require_postgres()
    prefix = f"u{uuid.uuid4().hex[:8]}_"
    store = await open_store(
        f"{PG_DSN}?schema={pg_schema}&table_prefix={prefix}", min_size=1, max_size=2
    )
    try:
        backend = store.backend
        assert getattr(backend, "schema", None) == pg_schema
        assert getattr(backend, "table_prefix", None) == prefix
        session = store.session("a")
        await session.add_items([{"n": 1}])
        await session.commit()
        assert [i.session_id for i in await store.list_sessions()] == ["a"]
    finally:
        await store.close()


async def test_postgres_errors_never_show_the_password(pg_schema: str) -> None:
    require_postgres()
    # Nothing listens on port 1; and a role that does not exist on the real server.
    for url in (
        f"postgresql://postgres:{SECRET}@127.0.0.1:1/postgres",
        f"postgresql://nobody_{uuid.uuid4().hex[:6]}:{SECRET}@127.0.0.1:5432/postgres",
        f"postgresql://postgres@127.0.0.1:1/postgres?password={SECRET}",
    ):
        with pytest.raises(StorageError) as info:
            await asyncio.wait_for(open_store(url, min_size=1, max_size=1), 30)
        message = str(info.value)
        assert SECRET not in message
        assert info.value.__cause__ is None  # the driver's exception is not chained
    with pytest.raises(ValueError) as bad:
        await open_store(f"postgresql://postgres:{SECRET}@127.0.0.1/postgres?schema=a-b")
    assert "a-b" in str(bad.value) and SECRET not in str(bad.value)


def test_package_import_does_not_load_the_cli() -> None:
    code = (
        "import sys, sessions; sessions.open_store; "
        "bad = [m for m in ('typer', 'rich', 'click', 'sessions.cli') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
