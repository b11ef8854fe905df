"""Helpers for the tests of the SDK's newer session flows: compaction, run context, run
states (approvals), threads.

The features these tests need, with the first openai-agents release that has each (read
from the released wheels), are added to ``tests.sdk.SINCE`` so that ``need_sdk`` skips a
test on an older release with the reason the CI skip policy allows, and fails it where
the release should have the feature.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sessions import BufferedSession, Store, TransactionalSession
from tests.conftest import Target, make_target
from tests.helpers import msg
from tests.sdk import SINCE, has
from tests.sdk import need_sdk as _need_sdk

SINCE.update(
    {
        # agents.memory.OpenAIResponsesCompactionSession
        "compaction_session": (0, 6, 6),
        # the runner passes the run context (wrapper=) to sessions whose methods take it
        "session_run_context": (0, 20, 0),
        # session._get_compaction_snapshot / agents.memory.session._CompactionSnapshot
        "compaction_snapshot": (0, 23, 0),
        # type(session)._atomic_replace_items, used for whole-history replacement
        "atomic_replace_items": (0, 24, 0),
    }
)

__all__ = [
    "BUFFERED_KINDS",
    "KINDS",
    "OUR_KINDS",
    "FakeCompactClient",
    "Opened",
    "compaction_session",
    "has",
    "msg",
    "need_sdk",
    "open_kind",
    "summary_text",
]


def _present(feature: str) -> bool | None:
    """Whether the installed SDK has ``feature``, as detected (``None``: not ours to detect)."""
    if feature == "compaction_session":
        import agents.memory

        return hasattr(agents.memory, "OpenAIResponsesCompactionSession")
    if feature == "session_run_context":
        import agents.memory.session

        return hasattr(agents.memory.session, "_session_accepts_wrapper")
    if feature == "compaction_snapshot":
        from sessions._engine.sdk import make_compaction_snapshot

        async def replace(start: int, output: list[Any]) -> bool:
            return False

        return make_compaction_snapshot([], True, replace) is not None
    if feature == "atomic_replace_items":
        import inspect

        from agents.memory import openai_responses_compaction_session as module

        return "_atomic_replace_items" in inspect.getsource(module)
    return None


def need_sdk(feature: str) -> None:
    """``tests.sdk.need_sdk``, with the hooks of these flows detected: a release that
    should have one but where we do not find it fails the test (our detection or the
    SDK changed), instead of passing without the feature."""
    _need_sdk(feature)
    present = _present(feature)
    if present is not None:
        _need_sdk(feature, present=present)


#: Where a history lives: our backends in both modes, and the wrapper over the SDK's own
#: SQLiteSession (a file) in both modes.
OUR_KINDS = ["sqlite-autocommit", "sqlite-buffered", "postgres-autocommit", "postgres-buffered"]
KINDS = [*OUR_KINDS, "wrapper-autocommit", "wrapper-buffered"]
BUFFERED_KINDS = [kind for kind in KINDS if kind.endswith("buffered")]


def compaction_session() -> Any:
    """``agents.memory.OpenAIResponsesCompactionSession`` (skips where the SDK lacks it)."""
    need_sdk("compaction_session")
    from agents.memory import OpenAIResponsesCompactionSession

    return OpenAIResponsesCompactionSession


def summary_text(items: list[Any]) -> str:
    """What the fake compaction says it summarized: the texts it was given, in order
    (a summary given to it counts as the texts it covers)."""
    covered: list[str] = []
    for item in items:
        if item.get("type") == "compaction":
            covered.extend(json.loads(item["encrypted_content"]))
        else:
            content = item.get("content")
            if isinstance(content, list):
                content = "".join(part.get("text", "") for part in content)
            covered.append(str(content))
    return json.dumps(covered)


class FakeCompactClient:
    """Stands in for ``AsyncOpenAI`` where the SDK calls ``client.responses.compact``.

    No network: the "compaction" is one ``{"type": "compaction", ...}`` item whose
    content lists the texts it summarized (see :func:`summary_text`). ``during`` runs
    inside the call (to change the history while the API "works").
    """

    def __init__(self, during: Callable[[], Awaitable[None]] | None = None) -> None:
        self.responses = self
        self.calls: list[dict[str, Any]] = []
        self.during = during

    async def compact(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        if self.during is not None:
            await self.during()
        text = summary_text(list(kwargs.get("input", [])))
        item = {"type": "compaction", "id": f"cmp-{len(self.calls)}", "encrypted_content": text}
        return SimpleNamespace(output=[item], usage=None)


@dataclass
class Opened:
    """A session of one kind, and ways to look at what is durable."""

    kind: str
    session: BufferedSession
    stored: Callable[[], Awaitable[list[Any]]]
    target: Target | None = None
    store: Store[Any] | None = None
    inner: Any = None
    cleanups: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    @property
    def buffered(self) -> bool:
        return self.kind.endswith("buffered")

    async def seed(self, items: list[Any]) -> None:
        """Store ``items`` durably (committed)."""
        await self.session.add_items(items)
        if self.buffered:
            await self.session.commit()


async def open_kind(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, sid: str
) -> AsyncIterator[Opened]:
    """Open a session of ``kind`` on a fresh database; close everything afterwards."""
    autocommit = kind.endswith("autocommit")
    if kind.startswith("wrapper"):
        from agents import SQLiteSession as SDKSQLiteSession

        path = tmp_path / "sdk.db"
        inner = SDKSQLiteSession(sid, path)
        session: BufferedSession = TransactionalSession(inner, autocommit=autocommit)

        async def stored_sdk() -> list[Any]:
            reader = SDKSQLiteSession(sid, path)
            try:
                return list(await reader.get_items())
            finally:
                reader.close()

        opened = Opened(kind, session, stored_sdk, inner=inner)
        try:
            yield opened
        finally:
            await session.rollback()
            await session.close()
            inner.close()
        return
    target = make_target(kind.split("-")[0], tmp_path, request)
    store = await target.open()
    session = store.session(sid, autocommit=autocommit)

    async def stored_ours() -> list[Any]:
        reader = await target.open()
        try:
            return await reader.session(sid).get_items()
        finally:
            await reader.close()

    opened = Opened(kind, session, stored_ours, target=target, store=store)
    try:
        yield opened
    finally:
        await session.rollback()
        await session.close()
        await target.close_all()
