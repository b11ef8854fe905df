"""Forks (issue 15): a new session holding a session's history up to a turn.

A fork is a copy, written through the commit path (:func:`sessions._engine.commit.write_batches`)
as one batch per copied turn, all in one transaction. Copy, not copy-on-write: reads of
a fork stay the plain reads of one session (no lookups through a parent chain on every
``get_items``), a fork outlives its source's pops, clears and deletion, and the cost is
paid once, when the fork is made (see ``docs/turns.md``).

Idempotent: batch ids derive from the source, the fork's id, ``at_turn``, the whole
copied history, each turn's position and its items, so running the same fork again
applies nothing, and two different forks never share a batch id. Atomic: the first
batch carries the fork record (:attr:`sessions.Batch.branch`); the backend checks,
in the transaction that writes it, that the target is fresh
(:func:`sessions._model.decide.decide`: no items, no hidden turns, no
fork record), else :class:`~sessions.errors.CommitConflictError` and nothing applied.
Running the same fork again returns its turn count only while the target still holds
those turns (checked by reading them); otherwise it is refused the same way.

A fork or a rewind at a turn is a cut of the history; :func:`refuse_split` refuses one
that would split a tool call from its output (the call's turn kept, the output's not).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .._model.backend import (
    AdminBackend,
    Batch,
    BranchBackend,
    BranchRecord,
    TurnBackend,
    TurnRecord,
)
from .._model.history import CALL_OUTPUT, answered_calls, open_calls, split_pair
from .._model.serde import decode_item
from .._model.turns import Turn, build_turns, window_turns
from ..errors import CommitConflictError, SessionError
from .commit import derived_batch_id, write_batches

if TYPE_CHECKING:
    from .store import Store

__all__ = ["Branch", "StoredTurns", "fork_history", "list_branches", "refuse_split"]

_PAGE = 500


@dataclass(frozen=True, slots=True)
class Branch:
    """A session forked from another (see :meth:`sessions.BufferedSession.branches`)."""

    session_id: str
    """The fork's id."""
    at_turn: int
    """It holds its source's turns 1 to ``at_turn`` as they were when it was made."""
    created_at: datetime


def _backend(store: Store[Any], operation: str) -> Any:
    backend = store.backend
    for protocol in (TurnBackend, BranchBackend, AdminBackend):
        if not isinstance(backend, protocol):
            raise SessionError(f"{operation}(): {type(backend).__name__} cannot fork sessions")
    return backend


class StoredTurns:
    """A session's stored turns (staging aside), read as far as a caller needs them.

    From the turn index (:meth:`TurnBackend.load_turn_window`): the oldest or newest
    turns asked for, more of either end on demand, never the item keys, so what it
    costs follows what is read, not the history's length. When the index is not exact
    (stored items no turn record covers), every turn at once, from the records and
    every key (:meth:`TurnBackend.load_turns`, :func:`build_turns`). Each read is one
    snapshot; a later read that finds another turn count (or no exact index) raises
    :class:`~sessions.errors.CommitConflictError`, nothing applied: another writer
    changed the history in between, call again.
    """

    __slots__ = ("_backend", "_head", "_operation", "_session_id", "_tail", "count")

    def __init__(
        self, backend: Any, session_id: str, operation: str, count: int, head: list[Turn]
    ) -> None:
        self._backend = backend
        self._session_id = session_id
        self._operation = operation
        self.count = count
        """How many turns the stored history holds."""
        self._head = head  # turns 1 to len(head)
        self._tail: list[Turn] = []  # the last len(tail) turns

    @classmethod
    async def read(
        cls,
        backend: Any,
        session_id: str,
        operation: str,
        *,
        oldest: int | None = None,
        newest: int | None = None,
    ) -> StoredTurns:
        """The turn count and the ``oldest`` first or ``newest`` last turns (both
        ``None``: all of them)."""
        window = await backend.load_turn_window(session_id, oldest=oldest, newest=newest)
        if window is None:
            records, keys = await backend.load_turns(session_id)
            every = build_turns(records, keys, clear=False, pops=(), staged=0)
            return cls(backend, session_id, operation, len(every), every)
        if newest is None:
            return cls(
                backend, session_id, operation, window.count, window_turns(window, newest=False)
            )
        turns = cls(backend, session_id, operation, window.count, [])
        turns._tail = window_turns(window, newest=True)
        return turns

    async def head(self, n: int) -> list[Turn]:
        """Turns 1 to ``n`` (``n`` at most :attr:`count`)."""
        if len(self._head) < n and len(self._tail) == self.count:
            self._head = self._tail
        if len(self._head) < n:
            self._head = await self._more(oldest=n)
        return self._head[:n]

    async def tail(self, n: int) -> list[Turn]:
        """The last ``n`` turns (``n`` at most :attr:`count`)."""
        if len(self._tail) < n and len(self._head) == self.count:
            self._tail = self._head
        if len(self._tail) < n:
            self._tail = await self._more(newest=n)
        return self._tail[len(self._tail) - n :] if n else []

    async def _more(self, *, oldest: int | None = None, newest: int | None = None) -> list[Turn]:
        window = await self._backend.load_turn_window(
            self._session_id, oldest=oldest, newest=newest
        )
        if window is None or window.count != self.count:
            raise CommitConflictError(
                f"{self._operation}() on session {self._session_id!r}: another writer "
                f"changed its turns while they were read (nothing applied); call "
                f"{self._operation}() again",
                session_id=self._session_id,
                outcome_known=True,
            )
        return window_turns(window, newest=newest is not None)


async def fork_history(
    store: Store[Any], source_id: str, target_id: str, at_turn: int | None
) -> int:
    """Copy turns 1 to ``at_turn`` (all when ``None``) of ``source_id`` into the new
    session ``target_id``; return the number of turns copied."""
    if target_id == source_id:
        raise ValueError(f"fork(): the new session id must differ from {source_id!r}")
    backend = _backend(store, "fork")
    turns = await StoredTurns.read(backend, source_id, "fork", oldest=at_turn)
    count = turns.count if at_turn is None else at_turn
    if not turns.count or not 1 <= count <= turns.count:
        raise ValueError(
            f"fork(): at_turn must be from 1 to {turns.count} (the turns of session "
            f"{source_id!r}), got {count}"
        )
    await refuse_split(backend, source_id, turns, count, "fork")
    chosen = await turns.head(count)
    texts = await _read(backend, source_id, chosen, "fork")
    batches = _batches(source_id, target_id, chosen, texts)
    ids = [batch.batch_id for batch in batches]
    if not await backend.applied(target_id, ids):
        # The backend refuses a target that is not fresh, in the writing transaction.
        await write_batches(store, target_id, batches)
        return count
    # The same fork ran before (all its ids are applied together, in one transaction).
    if not await _still_holds(backend, target_id, texts):
        raise CommitConflictError(
            f"fork of session {source_id!r} at turn {count} into session {target_id!r} "
            f"refused: this fork was made before, but session {target_id!r} no longer "
            "holds its turns (cleared, popped or rewound since); pick another id",
            session_id=target_id,
            outcome_known=True,
        )
    return count


async def _still_holds(backend: Any, session_id: str, texts: list[list[str]]) -> bool:
    """Whether turns 1 to ``len(texts)`` of ``session_id`` hold exactly ``texts``."""
    turns = await StoredTurns.read(backend, session_id, "fork", oldest=len(texts))
    if turns.count < len(texts):
        return False
    return await _read(backend, session_id, await turns.head(len(texts)), "fork") == texts


async def refuse_split(
    backend: Any, session_id: str, turns: StoredTurns, at: int, operation: str
) -> None:
    """Raise ``ValueError`` if cutting the stored ``turns`` after turn ``at`` splits a
    tool call from its output: a call in turns 1 to ``at`` answered in a later turn
    (:func:`sessions._model.history.split_pair`).

    Reads the shorter side of the cut first (in turns): the turns after it (a rewind
    of the last few), and the turns up to it only when those hold an output answering
    an earlier call; or the turns up to it (a fork at an early turn), and the turns
    after it only when those leave a call unanswered (a call answered before the cut
    is not split by an output repeated after it)."""
    if not 0 < at < turns.count:
        return  # nothing kept, or nothing cut off
    kept, cut = at, turns.count - at
    if cut <= kept:
        later = await _items(backend, session_id, await turns.tail(cut), operation)
        if not answered_calls([item for part in later for item in part]):
            return
        earlier = await _items(backend, session_id, await turns.head(kept), operation)
    else:
        earlier = await _items(backend, session_id, await turns.head(kept), operation)
        if not open_calls([item for part in earlier for item in part]):
            return
        later = await _items(backend, session_id, await turns.tail(cut), operation)
    found = split_pair(
        [item for part in earlier for item in part], [item for part in later for item in part]
    )
    if found is None:
        return
    call_index, output_index, kind, key = found
    call_turn = _turn_holding(earlier, call_index)
    output_turn = at + _turn_holding(later, output_index)
    name, lowest = ("to_turn", 0) if operation == "rewind" else ("at_turn", 1)
    choices = f"{name} {output_turn} or more keeps the pair"
    if call_turn - 1 > lowest:
        choices += f", {name} {call_turn - 1} or less leaves it out"
    elif call_turn - 1 == lowest:
        choices += f", {name} {lowest} leaves it out"
    raise ValueError(
        f"{operation}(): turn {at} of session {session_id!r} splits a tool call from its "
        f"output: {kind} {key!r} is in turn {call_turn}, its {CALL_OUTPUT[kind]} in turn "
        f"{output_turn} ({choices}); nothing was applied"
    )


async def _items(
    backend: Any, session_id: str, turns: list[Turn], operation: str
) -> list[list[Any]]:
    """The stored items of each of ``turns``; a corrupt row reads as ``None`` (it pairs
    with nothing)."""
    texts = await _read(backend, session_id, turns, operation)
    return [[_decoded(text) for text in part] for part in texts]


def _decoded(text: str) -> Any:
    try:
        return decode_item(text)
    except (ValueError, TypeError):
        return None


def _turn_holding(parts: list[list[Any]], index: int) -> int:
    """The number (from 1) of the part of ``parts`` holding the ``index``-th item of all."""
    for number, part in enumerate(parts, start=1):
        if index < len(part):
            return number
        index -= len(part)
    raise AssertionError("index past the items")


async def _read(
    backend: Any, session_id: str, turns: list[Turn], operation: str
) -> list[list[str]]:
    """The stored texts of each of ``turns`` (consecutive stored turns)."""
    first, last = turns[0].first_key, turns[-1].last_key
    assert first is not None and last is not None
    rows: list[tuple[int, str]] = []
    after: int | None = first - 1
    while True:
        page = await backend.read_range(session_id, after=after, limit=_PAGE)
        rows.extend(row for row in page if row[0] <= last)
        if len(page) < _PAGE or page[-1][0] >= last:
            break
        after = page[-1][0]
    out: list[list[str]] = [[] for _ in turns]
    index = 0
    for key, text in rows:
        while index < len(turns) and (turns[index].last_key or 0) < key:
            index += 1
        if index < len(turns):
            out[index].append(text)
    if [len(part) for part in out] != [turn.items for turn in turns]:
        raise SessionError(
            f"{operation}(): session {session_id!r} changed while it was read; "
            f"call {operation}() again"
        )
    return out


def _batches(
    source_id: str, target_id: str, turns: list[Turn], texts: list[list[str]]
) -> list[Batch]:
    batches: list[Batch] = []
    position = 0
    whole = hashlib.sha256()  # the whole copied history: forks of different ones share no id
    for part in texts:
        whole.update(f"{len(part)}\0".encode())
        for text in part:
            whole.update(text.encode("utf-8", "surrogatepass") + b"\n")
    scope = f"{source_id}\0{target_id}\0{len(turns)}\0{whole.hexdigest()}"
    for number, (turn, part) in enumerate(zip(turns, texts, strict=True), start=1):
        first = number == 1
        batches.append(
            Batch(
                derived_batch_id("frk", scope, position, part),
                False,
                (),
                tuple(part),
                # Usage stays with the source: the tokens were spent once.
                turn=TurnRecord(turn.run_id, turn.created_at),
                branch=BranchRecord(source_id, len(turns)) if first else None,
            )
        )
        position += len(part)
    return batches


async def list_branches(store: Store[Any], source_id: str) -> list[Branch]:
    backend = _backend(store, "branches")
    rows = await backend.load_branches(source_id)
    return [Branch(row.session_id, row.at_turn, row.created_at) for row in rows]
