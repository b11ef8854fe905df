"""Realistic Agents SDK input items, the same for every implementation measured.

One turn is four items, shaped like what ``Runner.run`` stores for a tool-using turn:
the user's message, the model's ``function_call``, the tool's ``function_call_output``
and the assistant's final message. Each is a few hundred bytes of JSON.
"""

from __future__ import annotations

import json
import random
from typing import Any

Item = dict[str, Any]

_WORDS = (
    "the order shipment arrived yesterday customer invoice refund account balance weather "
    "forecast tomorrow city temperature humidity wind please check status update ticket "
    "priority service request flight booking hotel reservation confirm cancel schedule "
    "meeting calendar report summary quarterly revenue growth region product inventory"
).split()


def _text(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(_WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words).capitalize() + "."


def make_turn(turn: int, *, seed: int = 0) -> list[Item]:
    """The four items of one tool-using turn (deterministic for ``(turn, seed)``)."""
    rng = random.Random(turn * 7919 + seed)
    call_id = f"call_{turn:06d}_{rng.getrandbits(48):012x}"
    city = rng.choice(["Lisbon", "Osaka", "Nairobi", "Lima", "Oslo", "Quebec"])
    tool_result = {
        "city": city,
        "temperature_c": round(rng.uniform(-10, 35), 1),
        "conditions": _text(rng, 60),
        "forecast": [
            {"day": d, "high": rng.randint(0, 30), "low": rng.randint(-10, 15)} for d in range(3)
        ],
    }
    return [
        {"role": "user", "content": _text(rng, 180)},
        {
            "id": f"fc_{turn:06d}",
            "type": "function_call",
            "call_id": call_id,
            "name": "get_weather",
            "arguments": json.dumps({"city": city, "units": "metric", "days": 3}),
            "status": "completed",
        },
        {
            "type": "function_call_output",
            "call_id": call_id,
            "output": json.dumps(tool_result),
        },
        {
            "id": f"msg_{turn:06d}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [
                {
                    "type": "output_text",
                    "text": _text(rng, 300),
                    "annotations": [],
                    "logprobs": [],
                }
            ],
        },
    ]


class TurnSource:
    """A fixed pool of turns handed out round-robin (no generation cost while timing)."""

    def __init__(self, size: int = 64, seed: int = 0) -> None:
        self._turns = [make_turn(i, seed=seed) for i in range(size)]
        self._next = 0
        self._seed = seed
        self._fresh = size  # turn numbers of items(): never one of the pool's

    def next(self) -> list[Item]:
        turn = self._turns[self._next % len(self._turns)]
        self._next += 1
        return turn

    def items(self, count: int) -> list[Item]:
        """``count`` items (whole turns, then a partial one), for setting up a history:
        every turn new, so no call id or item id repeats in it (a real history's do not;
        a repeated one is history the Responses API refuses, which our sessions
        quarantine at commit)."""
        out: list[Item] = []
        while len(out) < count:
            out.extend(make_turn(self._fresh, seed=self._seed))
            self._fresh += 1
        return out[:count]


def item_bytes() -> float:
    """Mean JSON size of one item, for the report."""
    turn = make_turn(1)
    return sum(len(json.dumps(item)) for item in turn) / len(turn)


#: What the same-work floors (``_subjects``) write per commit, recorded in each run's
#: results; runs made before the turn record was added to them recorded nothing, and
#: wrote ``SAME_WORK_ROWS_BEFORE``.
SAME_WORK_ROWS = ("batch record", "session row", "turn record", "items")
SAME_WORK_ROWS_BEFORE = ("batch record", "session row", "items")
