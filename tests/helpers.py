"""Helpers many test files share, written once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from sessions import Store
from sessions.errors import CommitError, TransientStorageError
from tests.provision import Provision


def msg(text: str, role: str = "user", **extra: Any) -> dict[str, Any]:
    """A message item: ``{"role": role, "content": text}`` plus ``extra`` keys."""
    return {"role": role, "content": text, **extra}


async def age(target: Provision, session_id: str, seconds: int) -> None:
    """Move the session's ``updated_at`` ``seconds`` into the past."""
    await target.execute(
        f"UPDATE txs_sessions SET updated_at = {target.ago('updated_at', seconds)} "
        f"WHERE session_id = {target.param(1)}",
        session_id,
    )


async def commit_one(store: Store[Any], session_id: str, **info: Any) -> None:
    """Commit ``msg(session_id)`` to the session, with ``set_info(**info)`` when given."""
    session = store.session(session_id)
    if info:
        session.set_info(**info)
    await session.add_items([msg(session_id)])
    await session.commit()


async def commit_each(session: Any, texts: Iterable[str]) -> None:
    """One commit per text, each of ``msg(text)``."""
    for text in texts:
        await session.add_items([msg(text)])
        await session.commit()


async def committed(store: Store[Any], session_id: str, *texts: str) -> Any:
    """A session of ``store`` with ``msg(text)`` for each text committed in one commit."""
    session = store.session(session_id)
    await session.add_items([msg(text) for text in texts])
    await session.commit()
    return session


async def histories(store: Store[Any]) -> dict[str, list[Any]]:
    """Every session's items, read back through the ordinary session API."""
    return {
        info.session_id: await store.session(info.session_id).get_items()
        async for info in store.iter_sessions()
    }


async def retrying(op: Callable[[], Awaitable[Any]], *, tries: int, pause: float) -> Any:
    """``await op()`` until it raises no commit or transient storage error, at most
    ``tries`` times, ``pause`` seconds apart."""
    last: BaseException | None = None
    for _ in range(tries):
        try:
            return await op()
        except (CommitError, TransientStorageError) as exc:
            last = exc
            await asyncio.sleep(pause)
    raise AssertionError(f"operation never succeeded: {last!r}")


async def hold_session_row(conn: Any, store: Any, session_id: str) -> None:
    """Begin a transaction on the asyncpg ``conn`` that locks the session's row of a
    ``PostgresStore`` (its next commit waits inside the database)."""
    await conn.execute("BEGIN")
    await conn.execute(
        f"SELECT 1 FROM {store.postgres.table('sessions')} WHERE session_id = $1 FOR UPDATE",
        session_id,
    )
