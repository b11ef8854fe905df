"""``sessions doctor``: find (and repair) stored history the Responses API would reject.

A session's stored rows are checked in order: a row that is not a JSON object is a
problem of its own (``not_an_object``: sessions skip such rows when reading, the
SDK's too); the JSON objects are then judged by the rules of
:func:`sessions._model.history.check_history` (orphan outputs, calls without outputs,
duplicate ids...) as the SDK would resume the history, the way a commit is judged
(``finished=False``): calls at the very end with nothing after them but calls, outputs
and reasoning are pending (a run cancelled mid-tool or waiting for an approval), not
missing their outputs; a call the conversation went past without its output is.

Sources: a txsessions store (:class:`~sessions.Store`, read page by page through
:meth:`AdminBackend.read_range`), or an SDK session database through the migration
readers of :mod:`sessions._tools.sources` (read-only; rows are then numbered by position).

Repair (txsessions stores only) writes ONE batch per damaged session through the
commit path (:func:`sessions._engine.commit.write_batches`): it pops the offending rows and
moves their text into the session's quarantine (:attr:`Batch.quarantine`) in the same
transaction, so nothing is deleted for good. Its id is derived from the session, the
rows it removes and their text (:func:`~sessions._engine.commit.derived_batch_id`, namespace
``doc``): a rerun, or a rerun after a crash mid-repair, never applies a repair twice
(the popped rows are gone, so a rerun finds nothing left to repair; a batch that did
land is skipped by id). The batch is conditioned on the newest row read
(:attr:`Batch.tail`): a row written meanwhile makes it a conflict, and the session is
checked again.

The turn index (``docs/turns.md``: each turn record's ``items``, the session's
``turn_count`` and ``turn_items``, kept by every write) is checked too, on backends that
keep one (:class:`~sessions._model.turnindex.TurnIndexBackend`): the backend reads the
stored counts and what the rows say in one snapshot, and the core's rule
(:func:`sessions._model.turnindex.index_mismatches`) names each count that disagrees. Its
repair recomputes the counts in one transaction of the backend per session, from the rows
as they are inside that transaction (:func:`sessions._model.turnindex.index_repair`): no item
moves, nothing is committed as a batch (the version and ``updated_at`` stay), and a rerun
finds nothing left to recompute. It runs after the rows' repair, whose pops keep the
counts as they were.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._engine.commit import derived_batch_id, write_batches
from .._model.backend import AdminBackend, Batch, Row
from .._model.history import check_history
from .._model.turnindex import IndexMismatch, TurnIndexBackend, index_mismatches
from ..errors import CommitConflictError, SessionError
from .sources import Source

if TYPE_CHECKING:
    from .._engine.store import Store

__all__ = [
    "NOT_AN_OBJECT",
    "IndexMismatch",
    "Problem",
    "SessionCheck",
    "check_rows",
    "check_source",
    "check_store",
    "repair_batch",
]

#: The kind of a stored row that is not a JSON object (invalid JSON, ``NaN``, a list...).
NOT_AN_OBJECT = "not_an_object"

#: How many times a repair is planned again after a concurrent writer changed the session.
REPAIR_ATTEMPTS = 3

PAGE = 500


@dataclass(frozen=True, slots=True)
class Problem:
    """One stored row the API would reject (or that is not history at all)."""

    key: int
    """The row's key (txsessions stores), or its position (SDK databases: 1 is the oldest)."""
    kind: str
    call_id: str | None
    message: str
    """Names the item type and call id; never shows the item's text."""
    text: str = field(repr=False)
    """The stored row, moved into the quarantine by a repair."""


@dataclass(slots=True)
class SessionCheck:
    """What one session holds that the API would reject, and what was done about it."""

    session_id: str
    rows: int
    problems: list[Problem]
    finished: bool = False
    """Judged as a finished history (see :func:`check_rows`)."""
    tail: int | None = None
    """The newest key read (txsessions stores)."""
    repaired: list[Problem] = field(default_factory=list)
    """Rows a repair moved into the quarantine (with ``--repair``)."""
    error: str | None = None
    """Why a repair failed (the problems then remain)."""
    quarantine: list[tuple[str, str]] = field(default_factory=list)
    """``(reason, text)`` of what the session's quarantine holds (after any repair)."""
    index: list[IndexMismatch] = field(default_factory=list)
    """The counts of the session's turn index that disagree with its rows."""
    index_repaired: bool = False
    """The turn index was recomputed from the rows (with ``--repair``)."""
    index_error: str | None = None
    """Why recomputing the turn index failed (its mismatches then remain)."""

    @property
    def remaining(self) -> list[Problem]:
        """The problems still stored (all of them unless a repair removed them)."""
        return [] if self.repaired and self.error is None else self.problems

    @property
    def index_remaining(self) -> list[IndexMismatch]:
        """The turn index mismatches still stored (none once it was recomputed)."""
        return [] if self.index_repaired else self.index


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_decode = json.JSONDecoder(parse_constant=_refuse_constant).decode


def _json_object(text: str) -> tuple[dict[str, Any] | None, str]:
    """The row as a JSON object, or ``None`` and why not (strict JSON: no ``NaN``)."""
    try:
        value = _decode(text)
    except (ValueError, TypeError, RecursionError) as exc:
        return None, f"not valid JSON ({type(exc).__name__})"
    if not isinstance(value, dict):
        return None, f"a JSON {type(value).__name__}, not an object"
    return value, ""


def check_rows(session_id: str, rows: Sequence[Row], *, finished: bool = False) -> SessionCheck:
    """Judge a session's stored rows (oldest first); see the module docstring.

    ``finished=True`` judges the end too (a call at the end without its output is then
    missing it).
    """
    problems: list[Problem] = []
    keys: list[int] = []
    texts: list[str] = []
    items: list[dict[str, Any]] = []
    for key, text in rows:
        value, why = _json_object(text)
        if value is None:
            problems.append(Problem(key, NOT_AN_OBJECT, None, f"stored row is {why}", text))
            continue
        keys.append(key)
        texts.append(text)
        items.append(value)
    for defect in check_history(items, finished=finished):
        index = defect.index
        problems.append(
            Problem(keys[index], defect.kind, defect.call_id, defect.message, texts[index])
        )
    problems.sort(key=lambda problem: problem.key)
    tail = rows[-1][0] if rows else None
    return SessionCheck(session_id, len(rows), problems, finished, tail)


def _removals(check: SessionCheck, rows: Sequence[Row]) -> list[Problem]:
    """Every row to move out so that what stays passes the rules.

    The flagged rows go first; what stays is judged again (taking out a call can leave
    an item that belonged to it, e.g. a reasoning item, on its own) until it is clean.
    """
    removed = {problem.key: problem for problem in check.problems}
    for _ in range(len(rows)):
        kept = [row for row in rows if row[0] not in removed]
        again = check_rows(check.session_id, kept, finished=check.finished).problems
        if not again:
            break
        removed.update((problem.key, problem) for problem in again)
    return sorted(removed.values(), key=lambda problem: problem.key)


def repair_batch(check: SessionCheck, rows: Sequence[Row]) -> tuple[Batch, list[Problem]] | None:
    """The batch that moves the session's problems into its quarantine (``None``: clean)."""
    if not check.problems:
        return None
    removed = _removals(check, rows)
    facts = [f"{p.key}\0{p.kind}\0{p.text}" for p in removed]
    batch = Batch(
        derived_batch_id("doc", check.session_id, removed[0].key, facts),
        clear=False,
        pops=tuple(p.key for p in removed),
        items=(),
        tail=check.tail,
        quarantine=tuple((_reason(p), p.text) for p in removed),
    )
    return batch, removed


def _reason(problem: Problem) -> str:
    return f"sessions doctor: {problem.kind}: {problem.message}"


# --------------------------------------------------------------------------- stores


async def _read_all(admin: AdminBackend, session_id: str) -> list[Row]:
    rows: list[Row] = []
    after: int | None = None
    while True:
        page = await admin.read_range(session_id, after=after, limit=PAGE)
        rows.extend(page)
        if len(page) < PAGE:
            return rows
        after = page[-1][0]


async def _check_session(
    store: Store[Any], admin: AdminBackend, session_id: str, repair: bool
) -> SessionCheck:
    for _ in range(REPAIR_ATTEMPTS):
        rows = await _read_all(admin, session_id)
        check = check_rows(session_id, rows)
        planned = repair_batch(check, rows) if repair else None
        if planned is None:
            return check
        batch, removed = planned
        try:
            await write_batches(store, session_id, [batch])
        except CommitConflictError:
            continue  # written meanwhile: judge the new history
        except SessionError as exc:
            check.error = str(exc)
            return check
        check.repaired = removed
        return check
    check.error = f"the session kept changing: gave up after {REPAIR_ATTEMPTS} attempts"
    return check


async def _quarantine(admin: AdminBackend, session_id: str) -> list[tuple[str, str]]:
    entries = await admin.read_quarantine(session_id)
    return [(entry.reason, entry.data) for entry in entries]


async def _check_index(index: TurnIndexBackend, check: SessionCheck, repair: bool) -> None:
    """Check the session's turn index against its rows; with ``repair``, recompute it
    (in one transaction of the backend) when it disagrees."""
    facts = await index.load_turn_index(check.session_id)
    check.index = [] if facts is None else index_mismatches(facts)
    if not (check.index and repair):
        return
    try:
        await index.repair_turn_index(check.session_id)
    except SessionError as exc:
        check.index_error = str(exc)
        return
    check.index_repaired = True


async def _session(
    store: Store[Any],
    admin: AdminBackend,
    index: TurnIndexBackend | None,
    session_id: str,
    repair: bool,
) -> SessionCheck:
    check = await _check_session(store, admin, session_id, repair)
    if index is None:
        check.quarantine = await _quarantine(admin, session_id)
    else:  # two reads of other tables, sent together (one wait, not two)
        _, check.quarantine = await asyncio.gather(
            _check_index(index, check, repair), _quarantine(admin, session_id)
        )
    return check


async def check_store(
    store: Store[Any],
    *,
    session_id: str | None = None,
    repair: bool = False,
    page_size: int = PAGE,
) -> AsyncIterator[SessionCheck]:
    """Check (and with ``repair``, repair) every session of ``store``, or just one.

    Yields one :class:`SessionCheck` per session, ordered by id, sessions listed a page
    at a time: memory holds one session's rows at a time. (Checking several sessions
    at once was tried: slower on both backends.)
    """
    store.check_usable("doctor")
    admin = store.backend
    if not isinstance(admin, AdminBackend):
        raise SessionError(f"doctor: {type(admin).__name__} does not support store operations")
    index = admin if isinstance(admin, TurnIndexBackend) else None  # asked once, not per session
    ids = _one(session_id) if session_id is not None else _ids(store, page_size)
    async for sid in ids:
        yield await _session(store, admin, index, sid, repair)


async def _one(session_id: str) -> AsyncIterator[str]:
    yield session_id


async def _ids(store: Store[Any], page_size: int) -> AsyncIterator[str]:
    async for info in store.iter_sessions(page_size=page_size):
        yield info.session_id


# --------------------------------------------------------------------------- SDK databases


async def check_source(
    source: Source, *, session_id: str | None = None
) -> AsyncIterator[SessionCheck]:
    """Check the sessions of an SDK session database (read-only), or just one
    (:class:`~sessions.errors.SessionError` if the database does not have it).

    Rows are keyed by their position in the session (1 for the oldest), in the order
    the SDK reads them. Memory holds the list of session ids and one session's rows.
    """
    sessions = await source.sessions()
    if session_id is not None:
        sessions = [entry for entry in sessions if entry[0] == session_id]
        if not sessions:
            raise SessionError(f"unknown session {session_id!r} in {source.description}")
    for sid, _count in sessions:
        rows: list[Row] = []
        async for page in source.rows(sid, PAGE):
            base = len(rows)
            rows.extend((base + i, text) for i, text in enumerate(page, 1))
        yield check_rows(sid, rows)
