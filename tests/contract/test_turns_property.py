"""Random commit / pop / fork / rewind / undo sequences against a model (issue 15).

(A "pop" pops the last turn's items one by one in one commit: single-item pops can
leave a call without its output, which is issue 14's integrity check, not this one's.)

After every step, every session (the original and each fork) reads exactly the model's
history: the same items in the same turns, every tool call with its output, the last
whole turn by ``get_items(turns=1)``. At the end every rewind that can be undone is
undone, and the model's hidden turns come back: nothing was lost. Bounded: a few dozen
short sequences per backend (SQLite, PostgreSQL, memory), well under 30 s.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessions import Store
from sessions.errors import CommitConflictError
from tests.conftest import BACKENDS, make_target

Item = dict[str, Any]


@dataclass
class Model:
    """One session: visible turns of ``(key, item)``, and a stack of hidden turn lists."""

    turns: list[list[tuple[int, Item]]] = field(default_factory=list)
    hidden: list[list[list[tuple[int, Item]]]] = field(default_factory=list)

    def items(self) -> list[Item]:
        return [item for turn in self.turns for _, item in turn]

    def keys(self) -> list[int]:
        return [key for turn in self.turns for key, _ in turn]


def turn_items(tag: str, shape: int) -> list[Item]:
    """A turn: a question, maybe a tool call with its output, an answer."""
    items: list[Item] = [{"role": "user", "content": f"q {tag}"}]
    if shape:
        items.append({"type": "function_call", "call_id": tag, "name": "f", "arguments": "{}"})
        items.append({"type": "function_call_output", "call_id": tag, "output": "ok"})
    items.append({"role": "assistant", "content": f"a {tag}"})
    return items


_op = st.one_of(
    st.tuples(st.just("commit"), st.integers(0, 2), st.integers(0, 1)),
    st.tuples(st.just("commit"), st.integers(0, 2), st.integers(0, 1)),
    st.tuples(st.just("pop"), st.integers(0, 2), st.just(0)),
    st.tuples(st.just("fork"), st.integers(0, 2), st.integers(0, 5)),
    st.tuples(st.just("rewind"), st.integers(0, 2), st.integers(0, 5)),
    st.tuples(st.just("undo"), st.integers(0, 2), st.just(0)),
)


class Run:
    def __init__(self, store: Store[Any]) -> None:
        self.store = store
        self.prefix = uuid.uuid4().hex[:8]
        self.models: dict[str, Model] = {f"{self.prefix}-0": Model()}
        self.next_key: dict[str, int] = {f"{self.prefix}-0": 0}
        self.count = 0

    def pick(self, index: int) -> str:
        ids = sorted(self.models)
        return ids[index % len(ids)]

    async def step(self, op: str, which: int, arg: int) -> None:
        sid = self.pick(which)
        model, session = self.models[sid], self.store.session(sid)
        if op == "commit":
            self.count += 1
            items = turn_items(f"{sid}.{self.count}", arg)
            await session.add_items(items)
            await session.commit()
            first = self.next_key[sid]
            model.turns.append([(first + n, item) for n, item in enumerate(items)])
            self.next_key[sid] = first + len(items)
        elif op == "pop" and model.turns:  # the whole last turn, item by item, one commit
            for _ in model.turns[-1]:
                await session.pop_item()
            await session.commit()
            model.turns.pop()
        elif op == "fork" and model.turns:
            at = arg % len(model.turns) + 1
            new = f"{self.prefix}-{len(self.models)}"
            assert await session.fork(new, at_turn=at) == at
            self.models[new] = Model([list(turn) for turn in model.turns[:at]])
            self.next_key[new] = max(self.models[new].keys()) + 1
        elif op == "rewind":
            to = arg % (len(model.turns) + 1)
            assert await session.rewind(to_turn=to) == len(model.turns) - to
            if to < len(model.turns):
                model.hidden.append(model.turns[to:])
                model.turns = model.turns[:to]
        elif op == "undo":
            await self.undo(sid)

    async def undo(self, sid: str) -> bool:
        model, session = self.models[sid], self.store.session(sid)
        if not model.hidden:
            assert await session.undo_rewind() == 0
            return False
        newest = model.hidden[-1]
        if any(key > newest[0][0][0] for key in model.keys()):
            with pytest.raises(CommitConflictError):
                await session.undo_rewind()
            return False
        assert await session.undo_rewind() == len(newest)
        model.turns.extend(model.hidden.pop())
        return True

    async def check(self) -> None:
        for sid, model in self.models.items():
            session = self.store.session(sid)
            items = await session.get_items()
            assert items == model.items(), sid
            turns = await session.turns()
            assert [t.items for t in turns] == [len(t) for t in model.turns]
            assert all(t.created_at is not None for t in turns)  # each a recorded commit
            last = [item for _, item in model.turns[-1]] if model.turns else []
            assert await session.get_items(turns=1) == last
            calls = set()
            for item in items:  # every output has its call before it, every call its output
                if item.get("type") == "function_call":
                    calls.add(item["call_id"])
                elif item.get("type") == "function_call_output":
                    assert item["call_id"] in calls
                    calls.discard(item["call_id"])
            assert not calls


async def play(store: Store[Any], ops: list[tuple[str, int, int]]) -> None:
    run = Run(store)
    for op in ops:
        await run.step(*op)
        await run.check()
    for sid in sorted(run.models):  # undo what can be undone: nothing was lost
        while await run.undo(sid):
            pass
    await run.check()


@pytest.mark.parametrize("kind", [*BACKENDS, "memory"])
def test_random_fork_rewind_commit_undo_sequences_keep_every_branch_valid_and_whole(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = make_target(kind, tmp_path, request)  # one database; each example its own ids

    @settings(
        max_examples=30,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(ops=st.lists(_op, min_size=1, max_size=16))
    def scenario(ops: list[tuple[str, int, int]]) -> None:
        async def main() -> None:
            store = await target.open_store()
            try:
                await play(store, ops)
            finally:
                await store.close()

        asyncio.run(main())

    scenario()
