"""The batches staging seals are the ``Batch`` values the dataclass itself would build.

``sessions._model.backend.staged_batch`` builds a sealed batch without the frozen
dataclass's ``__init__`` (it is on every commit's path); these tests pin that it sets
every field, to the value ``Batch(...)`` gives, so a field added to ``Batch`` and
forgotten there fails here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sessions._model.backend import (
    Batch,
    InfoChange,
    RunStateChange,
    TurnRecord,
    TurnUsage,
    staged_batch,
)
from sessions._model.serde import encode_staged
from sessions._model.staging import Staging

CASES: list[dict[str, Any]] = [
    {
        "tail": None,
        "run_state": None,
        "turn": None,
        "info": None,
        "expect_version": None,
        "incarnation": None,
        "shapes": None,
    },
    {
        "tail": 7,
        "run_state": RunStateChange("{}", 2, "label"),
        "turn": TurnRecord("run", usage=TurnUsage(1, 2, 3)),
        "info": InfoChange(frozenset({"title"}), title="t"),
        "expect_version": 3,
        "incarnation": "life",
        "shapes": ({"type": "message"},),
    },
]


@pytest.mark.parametrize("fields", CASES)
def test_staged_batch_equals_the_dataclass_built_one(fields: dict[str, Any]) -> None:
    made = staged_batch("b1", True, (1, 2), ('{"a":1}',), **fields)
    expected = Batch("b1", True, (1, 2), ('{"a":1}',), **fields)
    for field in dataclasses.fields(Batch):  # every slot set (an unset one raises here)
        assert getattr(made, field.name) == getattr(expected, field.name), field.name
    assert made == expected and hash(made) == hash(expected) and repr(made) == repr(expected)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.clear = False  # type: ignore[misc]
    assert dataclasses.replace(made, clear=False) == dataclasses.replace(expected, clear=False)


def test_sealed_batches_carry_what_was_staged() -> None:
    staging = Staging()
    staging.run_id = "run-1"
    texts, shapes = encode_staged([{"role": "user", "content": "hi"}])
    staging.add(texts, shapes)
    (batch,) = staging.seal(4, "life")
    assert batch == Batch(
        batch.batch_id,
        False,
        (),
        tuple(texts),
        turn=TurnRecord("run-1"),
        expect_version=4,
        incarnation="life",
        shapes=tuple(shapes),
    )
    assert batch.shapes == tuple(shapes)  # not compared by ==
