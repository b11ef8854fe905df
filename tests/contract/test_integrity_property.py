"""Property: random sequences of runs never store or serve history the API would refuse.

Each example drives one session (default integrity, ``"quarantine"``, or ``"reject"``)
on SQLite and on PostgreSQL through a random sequence of: whole turns committed in one
transaction, turns written by an autocommit session one ``add_items`` at a time (the
SDK's order: input, model output, tool outputs), turns cut short (cancelled, or waiting
for an approval: calls left without outputs, committed), poisoned writes (an output
without its call, an output answering twice, a reasoning item followed by a user
message), pops, and limited reads. After every step the stored history, read by another
store, keeps the pairing rules: no orphan output, no call or output twice; a call
without its output only where a turn was cut short or a pop took the output away; and
every limited read served keeps them as well.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessions._model.history import check_history
from sessions.errors import InvalidHistoryError
from tests.conftest import BACKENDS, Target, make_target

CALL_TYPES = ["function_call", "custom_tool_call", "shell_call", "apply_patch_call"]


def _call(kind: str, key: str) -> dict[str, Any]:
    return {"type": kind, "call_id": key}


def _output(kind: str, key: str) -> dict[str, Any]:
    return {"type": f"{kind}_output", "call_id": key, "output": "ok"}


turn = st.tuples(
    st.just("turn"),
    st.sampled_from(["transaction", "autocommit"]),
    st.lists(st.sampled_from(CALL_TYPES), max_size=3),
    st.booleans(),  # a reasoning item before the calls
)
cut = st.tuples(st.just("cut"), st.lists(st.sampled_from(CALL_TYPES), min_size=1, max_size=3))
poison = st.tuples(st.just("poison"), st.sampled_from(["orphan", "twice", "reasoning"]))
pop = st.tuples(st.just("pop"), st.integers(1, 3))
read = st.tuples(st.just("read"), st.integers(1, 8))
operations = st.lists(st.one_of(turn, cut, poison, pop, read), min_size=1, max_size=12)


class Model:
    """What the test knows of the session: call ids that may lawfully lack an output."""

    def __init__(self) -> None:
        self.n = 0
        self.may_lack_output: set[str] = set()
        self.last_call: tuple[str, str] | None = None

    def key(self) -> str:
        self.n += 1
        return f"c{self.n}"


def _turn_items(model: Model, calls: list[str], reason: bool) -> list[list[Any]]:
    """A turn as the SDK writes it: input, then model output, tool outputs, answer."""
    writes: list[list[Any]] = [[{"role": "user", "content": f"u{model.n}"}]]
    keys = [(kind, model.key()) for kind in calls]
    output: list[Any] = (
        [{"type": "reasoning", "id": f"rs{model.key()}", "summary": []}] if reason else []
    )
    output += [_call(kind, key) for kind, key in keys]
    if keys:
        writes.append(output)
        writes.append([_output(kind, key) for kind, key in keys])
        output = []
        model.last_call = keys[-1]
    writes.append([*output, {"type": "message", "role": "assistant", "content": "a"}])
    return writes


def _poison(model: Model, kind: str) -> list[Any]:
    if kind == "orphan":
        return [_output("function_call", model.key())]
    if kind == "twice" and model.last_call is not None:
        return [_output(*model.last_call)]
    return [
        {"type": "reasoning", "id": f"rs-p{model.key()}", "summary": []},
        {"role": "user", "content": "x"},
    ]


#: The pairing rules, enforced whole at commit. (Duplicate ids and reasoning followers are
#: checked against the part of the stored history a commit reads, and a pop may take away
#: what followed a stored reasoning item: docs/history.md.)
PAIRING = {"orphan_output", "missing_output", "duplicate_call", "duplicate_output"}


def _check(items: list[Any], model: Model) -> None:
    for defect in check_history(items, finished=False):
        if defect.kind not in PAIRING:
            continue
        if defect.kind == "missing_output" and defect.call_id in model.may_lack_output:
            continue
        raise AssertionError(f"stored or served history breaks a rule: {defect}")


async def _step(target: Target, session: Any, auto: Any, model: Model, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "turn":
        _, how, calls, reason = op
        writes = _turn_items(model, calls, reason)
        if how == "autocommit":
            for write in writes:
                await auto.add_items(write)
        else:
            async with session.transaction():
                for write in writes:
                    await session.add_items(write)
    elif kind == "cut":
        writes = _turn_items(model, op[1], False)
        async with session.transaction():
            await session.add_items(writes[0])
            await session.add_items(writes[1])  # the calls; their outputs never come
        model.may_lack_output.update(item["call_id"] for item in writes[1] if "call_id" in item)
    elif kind == "poison":
        await session.add_items(_poison(model, op[1]))
        try:
            await session.commit()
        except InvalidHistoryError:
            await session.rollback()
    elif kind == "pop":
        for _ in range(op[1]):
            item = await auto.pop_item()
            if isinstance(item, dict) and item.get("type", "").endswith("_output"):
                model.may_lack_output.add(item["call_id"])
    else:
        _check(await session.get_items(limit=op[1]), model)


async def _scenario(target: Target, integrity: str, ops: list[tuple[Any, ...]]) -> None:
    sid = f"p-{uuid.uuid4().hex}"
    store = await target.open(integrity=integrity)
    reader = await target.open(integrity="off")
    try:
        session, auto = store.session(sid), store.session(sid, autocommit=True)
        model = Model()
        for op in ops:
            await _step(target, session, auto, model, op)
            _check(await reader.session(sid).get_items(), model)
    finally:
        await store.close()
        await reader.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_random_runs_never_store_or_serve_history_breaking_the_pairing_rules(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = make_target(kind, tmp_path, request)

    @settings(
        max_examples=20,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        database=None,
    )
    @given(integrity=st.sampled_from(["quarantine", "reject"]), ops=operations)
    def run(integrity: str, ops: list[tuple[Any, ...]]) -> None:
        asyncio.run(_scenario(target, integrity, ops))

    run()
