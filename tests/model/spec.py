"""The model: what the docs say the public API does, as plain Python (no I/O).

Written from README.md, docs/turns.md, docs/catalogue.md, docs/history.md, docs/cli.md,
the public docstrings and the team's decisions D1-D7 (listed in the report of issue 28;
the test is described in docs/RELIABILITY.md, "Every operation against every other"),
never from the code.

Per session id a :class:`SessionModel` (turns, hidden turns per rewind, catalogue,
version, fork records, run state, the "life" deletions end); per session object an
:class:`ObjectModel` (what it has staged, the version and life it last saw). Each
operation is a function that returns an :class:`Outcome` (the value or the exception
types the call may end with) and changes the model only when the call applies.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sessions import errors

#: D4's new error; b92b180 does not have it yet (its parent is the closest there).
SessionDeletedError: type[Exception] = getattr(
    errors, "SessionDeletedError", errors.CommitConflictError
)

Item = dict[str, Any]
Usage = tuple[int, int, int, int, int]
ZERO: Usage = (0, 0, 0, 0, 0)
#: ``ObjectModel.version`` when the docs do not say what it is (checked: nothing).
ANY = object()

CALL, OUTPUT = "function_call", "function_call_output"
INFO_FIELDS = ("user_id", "title", "tags", "metadata", "ttl")


def add_usage(a: Usage | None, b: Usage | None) -> Usage | None:
    if a is None or b is None:
        return a if b is None else b
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4])


@dataclass
class TurnRec:
    seq: int  # the order of its keys: higher = committed later
    items: list[Item]
    run_id: str | None = None
    usage: Usage | None = None
    #: Written by an import (no turn record): adjacent such items read as one turn.
    unrecorded: bool = False


@dataclass
class SessionModel:
    exists: bool = False
    life: int = 0
    turns: list[TurnRec] = field(default_factory=list)
    hidden: list[list[TurnRec]] = field(default_factory=list)  # one entry per rewind
    info: dict[str, Any] = field(default_factory=dict)
    version: int | None = 0  # None: not known from the docs (a fork, an import)
    usage: Usage = ZERO
    run_state: tuple[str, str | None] | None = None
    rs_gen: int = 0
    fork_of: tuple[str, int, str] | None = None  # source, at_turn, source history
    branches: list[tuple[str, int]] = field(default_factory=list)

    def items(self) -> list[Item]:
        return [item for turn in self.turns for item in turn.items]


@dataclass
class ObjectModel:
    sid: str
    store: int
    autocommit: bool = False
    clear: bool = False
    pops: list[Item] = field(default_factory=list)  # stored items staged for removal
    staged: list[Item] = field(default_factory=list)
    turn_run_id: str | None = None
    run_id: str | None = None
    usage: Usage | None = None
    info: dict[str, Any] = field(default_factory=dict)
    run_state: tuple[str | None, str | None] | None = None  # (text or None: discard, label)
    rs_seen: int | None = None
    version: Any = None
    life: int | None = None
    #: The session's history (``history_key``) right after this object's last commit:
    #: what the integrity judge may take as the end of the history without reading it.
    seen: str | None = None

    def has_pending(self) -> bool:
        return bool(self.clear or self.pops or self.staged or self.info or self.run_state)

    def forget(self) -> None:
        """rollback(): every staged change goes, and the life it saw (D4)."""
        self.clear, self.pops, self.staged, self.usage = False, [], [], None
        self.info, self.run_state, self.life = {}, None, None


@dataclass(frozen=True)
class Outcome:
    value: Any = None
    errors: tuple[type[BaseException], ...] = ()

    @property
    def fails(self) -> bool:
        return bool(self.errors)


def ok(value: Any = None) -> Outcome:
    return Outcome(value)


def fail(*types: type[BaseException]) -> Outcome:
    return Outcome(None, types)


# ----------------------------------------------------------------------------- history


def call_key(item: Item) -> str | None:
    return item.get("call_id") if item.get("type") in (CALL, OUTPUT) else None


def defects(items: Sequence[Item]) -> set[tuple[str, str]]:
    """docs/history.md's rules for the items this model makes (messages, function
    calls and outputs), judged as a commit is (``finished=False``)."""
    found: set[tuple[str, str]] = set()
    calls: dict[str, int] = {}
    answered: set[str] = set()
    for index, item in enumerate(items):
        key = call_key(item)
        if item.get("type") == CALL and key is not None:
            if key in calls:
                found.add(("duplicate_call", key))
            calls[key] = index
        elif item.get("type") == OUTPUT and key is not None:
            if key not in calls:
                found.add(("orphan_output", key))
            elif key in answered:
                found.add(("duplicate_output", key))
            answered.add(key)
    for key, index in calls.items():
        if key in answered:
            continue
        after = items[index + 1 :]
        if any(item.get("type") not in (CALL, OUTPUT) for item in after):
            found.add(("missing_output", key))
    return found


def drop_orphans(items: list[Item]) -> list[Item]:
    """A window never starts with an output whose call fell before it (README, D6)."""
    calls = {call_key(i) for i in items if i.get("type") == CALL}
    start = 0
    while start < len(items):
        item = items[start]
        if item.get("type") == OUTPUT and call_key(item) not in calls:
            start += 1
            continue
        break
    return items[start:]


def splits_pair(before: list[TurnRec], after: list[TurnRec]) -> bool:
    """A cut between ``before`` and ``after`` parts a function call from its output."""
    kept = {call_key(i) for t in before for i in t.items if i.get("type") == CALL}
    cut = {call_key(i) for t in after for i in t.items if i.get("type") == OUTPUT}
    return bool(kept & cut)


def history_key(turns: Sequence[TurnRec]) -> str:
    return json.dumps([[t.items, t.run_id] for t in turns], sort_keys=True)


# ----------------------------------------------------------------------------- views


def stored_view(obj: ObjectModel, sess: SessionModel) -> list[TurnRec]:
    """The stored turns as the object's staged clear and pops change them."""
    if obj.clear:
        return []
    popped = [json.dumps(p, sort_keys=True) for p in obj.pops]
    out: list[TurnRec] = []
    for turn in sess.turns:
        kept = [i for i in turn.items if json.dumps(i, sort_keys=True) not in popped]
        if kept:
            out.append(TurnRec(turn.seq, kept, turn.run_id, turn.usage, turn.unrecorded))
    return out


def view_turns(obj: ObjectModel, sess: SessionModel) -> list[tuple[list[Item], bool, Any]]:
    """(items, pending, run id) per turn, as ``turns()`` of this object reads them."""
    out = [(t.items, False, t.run_id) for t in stored_view(obj, sess)]
    if obj.staged:
        out.append((list(obj.staged), True, obj.turn_run_id))
    return out


def view_items(obj: ObjectModel, sess: SessionModel) -> list[Item]:
    return [i for items, _, _ in view_turns(obj, sess) for i in items]


def read_limit(obj: ObjectModel, sess: SessionModel, limit: int) -> list[Item]:
    items = view_items(obj, sess)
    return drop_orphans(items[-limit:]) if limit else []


def read_turns(obj: ObjectModel, sess: SessionModel, count: int) -> list[Item]:
    if count == 0:
        return []
    chosen = view_turns(obj, sess)[-count:]
    return drop_orphans([i for items, _, _ in chosen for i in items])


def fresh_object(sid: str) -> ObjectModel:
    return ObjectModel(sid, 0)


def info_of(sess: SessionModel) -> dict[str, Any]:
    return {name: sess.info.get(name) for name in INFO_FIELDS}


def deep(items: list[Item]) -> list[Item]:
    return copy.deepcopy(items)
