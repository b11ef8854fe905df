"""The real side: two stores on one database (two app servers), the tracked session
objects, one event loop for a whole program, and the item makers."""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from collections.abc import Coroutine
from typing import Any

from sessions import Store
from tests.provision import PROVISIONS
from tests.provision.postgres import PG_DSN  # noqa: F401 - the soak imports it from here

from .spec import ObjectModel

#: Known defects of b92b180 whose programs are not generated (or checks not made), to
#: explore the others: empty in the suite; ``TXS_MODEL_SKIP=name,...`` while exploring
#: (the names are where ``skip()`` is called).
KNOWN_DEFECTS = frozenset(filter(None, os.environ.get("TXS_MODEL_SKIP", "").split(",")))


def skip(name: str) -> bool:
    return name in KNOWN_DEFECTS


#: Session ids a program uses (the real ids carry a per-program prefix).
MAIN_IDS = ("a", "b")
FORK_IDS = ("f1", "f2")
POOL = MAIN_IDS + FORK_IDS
USERS = ("u0", "u1")
#: Per store, per main id: one buffered object and one autocommit object.
LAYOUT = [(store, sid, auto) for store in (0, 1) for sid in MAIN_IDS for auto in (False, True)]
LAYOUT.append((0, "f1", False))  # a fork target that is written to after the fork


class _Loop:
    """One event loop for every step of a program (``asyncio.Runner`` is 3.11+)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        loop = self.loop
        try:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


class Harness:
    """Stores, objects and the loop of one program on one backend."""

    def __init__(self, kind: str, pg_schema: str | None = None) -> None:
        self.kind = kind
        self.runner = _Loop()
        self.prefix = f"m{uuid.uuid4().hex[:10]}-"
        self.tmp = tempfile.TemporaryDirectory(prefix="txs-model-")
        # Stores of the memory backend share one MemoryBackend; PostgreSQL: the run's schema.
        self.db = PROVISIONS[kind].new(self.tmp.name, name="model", schema=pg_schema or "public")
        self.stores: list[Store[Any]] = []
        self.objects: list[Any] = []
        self.run(self._start())

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.runner.run(coro)

    def rid(self, sid: str) -> str:
        return self.prefix + sid

    def uid(self, user: str) -> str:
        return self.prefix + user

    async def open_store(self) -> Store[Any]:
        return await self.db.open_store()

    def make_object(self, store: int, sid: str, auto: bool) -> Any:
        return self.stores[store].session(self.rid(sid), autocommit=auto, integrity="reject")

    async def _start(self) -> None:
        self.stores = [await self.open_store(), await self.open_store()]
        self.objects = [self.make_object(*spec) for spec in LAYOUT]

    async def reopen(self, index: int) -> None:
        for i, (store, _, _) in enumerate(LAYOUT):
            if store == index:
                await self.objects[i].rollback()
        await self.stores[index].close()
        self.stores[index] = await self.open_store()
        for i, spec in enumerate(LAYOUT):
            if spec[0] == index:
                self.objects[i] = self.make_object(*spec)

    def close(self) -> None:
        try:
            self.run(self._stop())
        finally:
            self.runner.close()
            self.tmp.cleanup()

    async def _stop(self) -> None:
        for obj in self.objects:
            if not obj.closed and obj.has_pending:
                await obj.rollback()
        store = self.stores[0]
        if self.db.shared and store.usable_here():
            for sid in POOL:  # the schema is shared by every program of a run
                await store.delete_session(self.rid(sid))
        for store in self.stores:
            await store.close()


def object_models() -> list[ObjectModel]:
    return [ObjectModel(sid, store, autocommit=auto) for store, sid, auto in LAYOUT]


class Items:
    """Unique items: messages, and function calls with their outputs."""

    def __init__(self) -> None:
        self.n = 0

    def _next(self) -> int:
        self.n += 1
        return self.n

    def make(self, units: list[str], open_call: str | None) -> list[dict[str, Any]]:
        """``units``: "user", "assistant", "pair" or (last only) "open" (a call whose
        output comes in a later batch); ``open_call``: the call the history the
        object reads ends with, answered first."""
        out: list[dict[str, Any]] = []
        if open_call is not None:
            out.append(output(open_call))
        for unit in units:
            n = self._next()
            if unit == "user":
                out.append({"role": "user", "content": f"u{n}"})
            elif unit == "assistant":
                out.append({"type": "message", "role": "assistant", "content": f"a{n}"})
            else:
                out.append(call(f"c{n}"))
                if unit == "pair":
                    out.append(output(f"c{n}"))
        return out


def call(key: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": key, "name": "t", "arguments": "{}"}


def output(key: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": key, "output": "done"}
