"""``session_settings``: ``SessionSettings()`` by default, a dict coerced, unknown keys refused
by name; the wrapper's settings are a copy of the wrapped session's, and its own reads are
never capped by the wrapped session's default limit."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sessions import SQLiteSession, Store, TransactionalSession
from tests.conftest import Target
from tests.helpers import msg
from tests.sdk import need_sdk


@pytest.fixture
def settings_class() -> Any:
    need_sdk("SessionSettings")
    from agents.memory.session_settings import SessionSettings

    return SessionSettings


@pytest.fixture
async def sessions(target: Target) -> AsyncIterator[Store[Any]]:
    store = await target.open()
    yield store


async def test_the_default_is_session_settings(
    settings_class: Any, sessions: Store[Any], tmp_path: Path
) -> None:
    one_liner = SQLiteSession("a", tmp_path / "x.db")
    for session in (sessions.session("a"), one_liner, TransactionalSession(one_liner)):
        assert isinstance(session.session_settings, settings_class)
        assert session.session_settings.limit is None
    await one_liner.close()


async def test_a_dict_is_coerced_and_gives_get_items_its_default_limit(
    settings_class: Any, sessions: Store[Any], sid: str
) -> None:
    session = sessions.session(sid, session_settings={"limit": 2})
    assert session.session_settings == settings_class(limit=2)
    await session.add_items([msg("1"), msg("2"), msg("3")])
    assert await session.get_items() == [msg("2"), msg("3")]
    assert await session.get_items(limit=3) == [msg("1"), msg("2"), msg("3")]
    session.session_settings = {"limit": 1}  # assignment is coerced too
    assert await session.get_items() == [msg("3")]
    session.session_settings = None  # back to the default
    assert session.session_settings == settings_class()
    await session.rollback()


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ({"limitt": 1}, "Unknown session_settings settings: limitt (SessionSettings has: limit)"),
        ({"limit": 1, "ttl": 2, "x": 3}, "Unknown session_settings settings: ttl, x"),
        ({"limit": -1}, "session_settings.limit must be >= 0, got -1"),
        ({"limit": "many"}, "session_settings {'limit': 'many'} is not valid"),
        (5, "must be an agents SessionSettings or a dict, got int"),
    ],
)
async def test_bad_settings_are_refused_naming_what_is_wrong(
    settings_class: Any, sessions: Store[Any], sid: str, value: Any, error: str
) -> None:
    with pytest.raises((TypeError, ValueError)) as info:
        sessions.session(sid, session_settings=value)
    assert error in str(info.value)
    with pytest.raises((TypeError, ValueError)):
        TransactionalSession(sessions.session(sid), session_settings=value)


async def test_the_wrapper_copies_the_wrapped_sessions_settings(
    settings_class: Any, tmp_path: Path
) -> None:
    from agents import SQLiteSession as SDKSQLiteSession

    inner = SDKSQLiteSession("w", tmp_path / "sdk.db", session_settings=settings_class(limit=2))
    wrapper = TransactionalSession(inner)
    assert wrapper.session_settings == settings_class(limit=2)
    assert wrapper.session_settings is not inner.session_settings
    wrapper.session_settings.limit = 5
    assert inner.session_settings.limit == 2
    inner.close()


async def test_the_wrappers_reads_are_not_capped_by_the_wrapped_sessions_limit(
    settings_class: Any, tmp_path: Path
) -> None:
    """The SDK's sessions read ``session_settings.limit`` items when asked for all."""
    from agents import SQLiteSession as SDKSQLiteSession

    inner = SDKSQLiteSession("w", tmp_path / "sdk.db", session_settings=settings_class(limit=2))
    await inner.add_items([msg(str(i)) for i in range(5)])
    wrapper = TransactionalSession(inner, session_settings=settings_class())
    assert len(await wrapper.get_items()) == 5
    assert len(await inner.get_items()) == 2  # the wrapped session itself: its own limit
    assert len(await TransactionalSession(inner).get_items()) == 2  # copied: same limit
    inner.close()


def test_before_session_settings_existed_a_value_is_refused_with_the_fix(tmp_path: Path) -> None:
    """On openai-agents releases before 0.8.0 the settings are ``None``, and a value is
    refused saying what to upgrade (checked on any release by hiding the class)."""
    import sys

    saved = sys.modules.get("agents.memory.session_settings")
    sys.modules["agents.memory.session_settings"] = None  # type: ignore[assignment]
    try:
        session = SQLiteSession("old", tmp_path / "x.db")
        assert session.session_settings is None
        with pytest.raises(TypeError, match=r"upgrade openai-agents or pass limit="):
            SQLiteSession("old", tmp_path / "x.db", session_settings={"limit": 1})
    finally:
        if saved is None:
            del sys.modules["agents.memory.session_settings"]
        else:
            sys.modules["agents.memory.session_settings"] = saved
