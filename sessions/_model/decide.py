"""What a batch means, decided once for every backend: :func:`decide`.

A backend that applies a :class:`~sessions._model.backend.Batch` with conditions reads, inside
its transaction and after writing the call's earlier batches, the few facts the batch's
conditions need (a :class:`Snapshot`), calls :func:`decide`, and writes the
:class:`Plan` it returns in its own SQL (``docs/architecture.md``: backends store and
load, the core decides and names the error). No backend compares versions, judges a
tail, pops, an undo, a fork target or a session's life itself.

The conditions are judged in this order, the first that fails raises (nothing of the
call is applied):

1. the batch id is already applied: skipped (nothing written);
2. the session's life (:attr:`Batch.incarnation`, :func:`sessions._model.catalogue.check_life`):
   :class:`~sessions.errors.DeletedConflictError`;
3. an undo (:class:`~sessions.RewindChange` ``(None)``) with nothing hidden is skipped
   whole: no batch record, no version, no ``updated_at``, no session row. It is not
   remembered as applied, so a retry of its batch id decides again, as a new undo would
   (``docs/turns.md``);
4. staged pops no longer stored (unless the batch clears): :func:`pops_gone`;
5. :attr:`Batch.expect_version`: :class:`~sessions.errors.VersionConflictError`;
6. :attr:`Batch.tail`: an item of another batch stored after it, once the batch's own
   clear and pops are done: :func:`tail_moved`;
7. :attr:`RunStateChange.expect_version`: :func:`run_state_moved`;
8. :attr:`Batch.branch`: the fork's target must be fresh, no stored items other than
   the fork's own, no hidden (rewound) items, no fork record (a catalogue entry is no
   obstacle, nor is an ordinary session that was cleared): :func:`fork_target_conflict`;
9. an undo whose hidden turns would interleave with items stored since (or with the
   batch's own items): :func:`undo_blocked`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConflictError
from .backend import Batch, BranchRecord
from .catalogue import check_life, version_conflict

__all__ = [
    "Plan",
    "Snapshot",
    "decide",
    "fork_target_conflict",
    "key_limit",
    "needs_snapshot",
    "pops_gone",
    "run_state_moved",
    "tail_moved",
    "undo_blocked",
    "undoes",
]


def needs_snapshot(batch: Batch) -> bool:
    """Whether ``batch`` has a condition beyond its id and its session's life, so the
    backend must read a :class:`Snapshot` and call :func:`decide` before writing it.

    The others (plain batches without pops) are written on the backend's fast path: its
    write skips an id already recorded, and the life it returns is judged by
    :func:`sessions._model.catalogue.check_life` (a row it created has a new life).
    """
    return bool(batch.pops) or not batch.plain


def undoes(batch: Batch) -> bool:
    """Whether ``batch`` undoes the newest rewind (:class:`~sessions.RewindChange`
    ``(None)``): the backend then reads :attr:`Snapshot.after_hidden`."""
    return batch.rewind is not None and batch.rewind.hide_after is None


def key_limit(batch: Batch) -> int:
    """How many keys a backend reads for each of :attr:`Snapshot.after_tail`,
    :attr:`Snapshot.after_hidden` and :attr:`Snapshot.stored`: one more than the
    batch's distinct pops, so at least one read key is one it does not pop, if any is."""
    return len(set(batch.pops)) + 1


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a backend read in its transaction for one batch, before writing it.

    The key tuples hold at most :func:`key_limit` keys, oldest first.
    """

    applied: bool = False
    """The batch id is recorded as applied."""
    life: str | None = None
    """The session's life token (``None``: no session row)."""
    version: int = 0
    """The session's version (``0``: no session row)."""
    pops_stored: int = 0
    """How many distinct keys of :attr:`Batch.pops` are stored."""
    after_tail: tuple[int, ...] = ()
    """Stored keys greater than :attr:`Batch.tail` (read only when it is set)."""
    newest_rewind: int | None = None
    """The highest rewind number items are hidden under (``None``: nothing hidden)."""
    after_hidden: tuple[int, ...] = ()
    """Stored keys greater than the first key hidden under :attr:`newest_rewind` (read
    only for an undo with something hidden)."""
    run_state_version: int = 0
    """The saved run state's version (``0``: never saved; read only with a run state)."""
    stored: tuple[int, ...] = ()
    """Stored keys (read only for a fork)."""
    fork_of: tuple[str, int] | None = None
    """The session's own fork record: source id and turn (read only for a fork)."""


@dataclass(frozen=True, slots=True)
class Plan:
    """What to write for a batch :func:`decide` accepted (besides its items, pops,
    clear, turn, catalogue, quarantine, fork record and restore times, written as the
    batch says)."""

    version: int
    """The session's version after the batch."""
    run_state_version: int | None = None
    """The version to save :attr:`Batch.run_state` under (``None``: no run state)."""
    hide_as: int | None = None
    """Hide the items after ``rewind.hide_after`` under this rewind number."""
    bring_back: int | None = None
    """Bring back the items and turns hidden under this rewind number (an undo)."""


def decide(session_id: str, batch: Batch, snapshot: Snapshot) -> Plan | None:
    """The plan for ``batch`` given ``snapshot``, ``None`` if the batch is skipped (written
    nothing, not recorded), or the conflict that refuses it (raised)."""
    if snapshot.applied:
        return None  # applied by an earlier attempt
    check_life(session_id, batch, snapshot.life)
    if undoes(batch) and snapshot.newest_rewind is None:
        return None  # nothing to undo: nothing written, not recorded
    _check_items(session_id, batch, snapshot)
    run_state_version = None
    if batch.run_state is not None:
        current = snapshot.run_state_version
        expected = batch.run_state.expect_version
        if expected is not None and expected != current:
            raise run_state_moved(session_id, current, expected)
        run_state_version = current + 1
    if batch.branch is not None:
        error = fork_target_conflict(
            session_id,
            batch.branch,
            holds_items=_kept(batch, snapshot.stored),
            holds_hidden=not batch.clear and snapshot.newest_rewind is not None,
            fork_of=snapshot.fork_of,
        )
        if error is not None:
            raise error
    hide_as, bring_back = _rewind(session_id, batch, snapshot)
    return Plan(snapshot.version + 1, run_state_version, hide_as, bring_back)


def _kept(batch: Batch, keys: tuple[int, ...]) -> bool:
    """Whether one of ``keys`` (stored before ``batch``) is still stored after its clear
    and pops."""
    return not batch.clear and any(key not in batch.pops for key in keys)


def _check_items(session_id: str, batch: Batch, snapshot: Snapshot) -> None:
    """The conditions on the stored items and the version: pops, ``expect_version``,
    ``tail``."""
    if not batch.clear and snapshot.pops_stored < len(batch.pops):
        raise pops_gone(session_id, len(batch.pops) - snapshot.pops_stored, len(batch.pops))
    if batch.expect_version is not None and batch.expect_version != snapshot.version:
        raise version_conflict(session_id, batch.expect_version, snapshot.version)
    if batch.tail is not None and _kept(batch, snapshot.after_tail):
        raise tail_moved(session_id)


def _rewind(session_id: str, batch: Batch, snapshot: Snapshot) -> tuple[int | None, int | None]:
    """``(hide_as, bring_back)`` of :class:`Plan` for ``batch.rewind``."""
    if batch.rewind is None:
        return None, None
    newest = None if batch.clear else snapshot.newest_rewind  # a clear drops hidden items
    if batch.rewind.hide_after is not None:
        return (newest or 0) + 1, None
    if newest is None:
        return None, None
    if batch.items or _kept(batch, snapshot.after_hidden):
        raise undo_blocked(session_id)
    return None, newest


def fork_target_conflict(
    session_id: str,
    branch: BranchRecord,
    *,
    holds_items: bool,
    holds_hidden: bool,
    fork_of: tuple[str, int] | None,
) -> ConflictError | None:
    """The error that refuses writing the fork ``branch`` into ``session_id``, or
    ``None`` if the target is fresh: ``holds_items``, whether an item of another batch
    is stored in it; ``holds_hidden``, whether a rewind hid items of it; ``fork_of``,
    its own fork record (source id, at turn), if any."""
    if fork_of is not None:
        source, at_turn = fork_of
        reason = f"it is already a fork of session {source!r} at turn {at_turn}"
    elif holds_hidden:
        reason = "it has hidden (rewound) turns"
    elif holds_items:
        reason = "it already holds items"
    else:
        return None
    return ConflictError(
        f"fork of session {branch.source_id!r} at turn {branch.at_turn} into session "
        f"{session_id!r} refused: {reason}; a fork needs a new session id (or delete the "
        "session first)"
    )


def pops_gone(session_id: str, missing: int, total: int) -> ConflictError:
    """``missing`` of a batch's ``total`` staged pops name items no longer stored."""
    return ConflictError(
        f"session {session_id!r}: {missing} of {total} popped item(s) were already "
        "removed by another writer"
    )


def tail_moved(session_id: str) -> ConflictError:
    """``Batch.tail``: items were stored after the end the batch was prepared against."""
    return ConflictError(
        f"session {session_id!r}: items were stored after the end of the history "
        "this replacement was prepared against"
    )


def run_state_moved(session_id: str, current: int, expected: int) -> ConflictError:
    """``RunStateChange.expect_version`` is not the saved run state's version."""
    return ConflictError(
        f"session {session_id!r}: the saved run state is at version {current}, "
        f"not {expected} as when it was read"
    )


def undo_blocked(session_id: str) -> ConflictError:
    """An undo whose hidden turns would interleave with turns committed since."""
    return ConflictError(
        f"session {session_id!r}: turns were committed after the rewound ones; "
        "undoing the rewind would interleave them"
    )
