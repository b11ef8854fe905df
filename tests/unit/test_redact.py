"""One redaction function: passwords with ``@ : / ? # %`` never reach errors or output.

Each password is tried raw (as a user who forgot to percent-encode would write it) and
percent-encoded, in the userinfo and in a ``?password=`` query parameter, through
``redact`` itself, ``open_store``, ``PostgresStore.open``, ``PostgresSession`` and the
``sessions`` command. Nothing listens on port 1, so every attempt fails and its error
is checked whole: message, ``repr`` and the formatted traceback with its causes.
"""

from __future__ import annotations

import asyncio
import traceback
from urllib.parse import quote

import pytest

from sessions import open_store
from sessions._model.redact import redact
from tests.cli.test_cli import cli

PASSWORDS = [
    "Pa@ss-word9",
    "Pa:ss-word9",
    "Pa/ss-word9",
    "Pa?ss-word9",
    "Pa#ss-word9",
    "Pa%ss-word9",
]
PASSWORDS.append("Mix@d:p/w?q#r%s")


def urls(password: str) -> list[str]:
    """The password raw and percent-encoded, in the userinfo and in the query string."""
    encoded = quote(password, safe="")
    return [
        f"postgresql://postgres:{password}@127.0.0.1:1/postgres",
        f"postgresql://postgres:{encoded}@127.0.0.1:1/postgres",
        f"postgresql://postgres@127.0.0.1:1/postgres?password={password}",
        f"postgresql://postgres@127.0.0.1:1/postgres?sslmode=disable&password={encoded}",
    ]


CASES = [(password, url) for password in PASSWORDS for url in urls(password)]
IDS = [f"{i}-{url.split('postgres', 2)[1][:3]}" for i, (_, url) in enumerate(CASES)]


def leaks(text: str, password: str) -> list[str]:
    """Every spelling of ``password`` found in ``text`` (and a long piece of it)."""
    spellings = {password, quote(password, safe=""), password[:6], password[-6:]}
    return sorted(s for s in spellings if s in text)


def whole(exc: BaseException) -> str:
    return f"{exc}\n{exc!r}\n" + "".join(traceback.format_exception(exc))


@pytest.mark.parametrize(("password", "url"), CASES, ids=IDS)
def test_redact_masks_every_spelling(password: str, url: str) -> None:
    alone = redact(url)
    assert leaks(alone, password) == []
    assert "***" in alone
    message = f"cannot open {url}: failed; password was {password!r} ({quote(password)})"
    assert leaks(redact(message, [url]), password) == []


def test_redact_keeps_what_is_not_secret() -> None:
    assert redact("postgresql://app@h:5432/db?schema=x") == "postgresql://app@h:5432/db?schema=x"
    assert redact("sqlite:////tmp/a:b@c.db") == "sqlite:////tmp/a:b@c.db"
    shown = redact("postgresql://app:pw@db.internal:6432/app?sslmode=require")
    assert shown == "postgresql://app:***@db.internal:6432/app?sslmode=require"
    assert redact("no url here, password=hunter22 and pwd=x1") == (
        "no url here, password=*** and pwd=***"
    )


@pytest.mark.parametrize(("password", "url"), CASES, ids=IDS)
async def test_open_store_errors_never_hold_the_password(password: str, url: str) -> None:
    with pytest.raises(Exception) as info:  # noqa: B017 - which error depends on the URL
        await asyncio.wait_for(open_store(url, min_size=1, max_size=1), 30)
    assert leaks(whole(info.value), password) == []


@pytest.mark.parametrize(("password", "url"), CASES, ids=IDS)
async def test_postgres_store_open_errors_never_hold_the_password(password: str, url: str) -> None:
    from sessions.postgres import PostgresStore

    with pytest.raises(Exception) as info:  # noqa: B017 - which error depends on the URL
        await asyncio.wait_for(PostgresStore.open(url, min_size=1, max_size=1), 30)
    assert leaks(whole(info.value), password) == []


@pytest.mark.parametrize(("password", "url"), CASES[::2], ids=IDS[::2])
async def test_postgres_session_errors_and_repr_never_hold_the_password(
    password: str, url: str
) -> None:
    from sessions.postgres import PostgresSession

    session = PostgresSession("s-1", url)
    assert leaks(repr(session), password) == []
    with pytest.raises(Exception) as info:  # noqa: B017 - which error depends on the URL
        await asyncio.wait_for(session.get_items(), 30)
    assert leaks(whole(info.value), password) == []
    await session.close()


@pytest.mark.parametrize("password", PASSWORDS)
async def test_cli_never_prints_the_password(password: str) -> None:
    runs = []
    for url in urls(password):
        runs += [cli("list", "--db", url), cli("--db", url, "stats", "--json")]
        runs.append(cli("show", "x", env={"SESSIONS_DATABASE_URL": url}))
    for result in await asyncio.gather(*runs):
        assert result.code != 0
        assert result.err.startswith("error: ") and result.err.count("\n") == 1, result.err
        assert leaks(result.out + result.err, password) == [], result.err
