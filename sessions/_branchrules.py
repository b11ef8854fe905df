"""The rules a fork's or an undo's batch is applied by, decided once for every backend.

A backend reads, inside the transaction that applies the batch, the few facts these
functions need (it stores and loads; the core decides, ``docs/architecture.md``):

* :func:`skips_undo`: an undo (:class:`~sessions.RewindChange` ``(None)``) when nothing
  is hidden is skipped whole: no batch record, no version, no ``updated_at``, no session
  row. It is not remembered as applied, so a retry of its batch id decides again, as a
  new undo would (``docs/turns.md``).
* :func:`fork_target_conflict`: a fork's target must be fresh: no stored items other
  than the fork's own, no hidden (rewound) items, no fork record. A catalogue entry
  (``set_info``) is no obstacle, nor is an ordinary session that was cleared.
"""

from __future__ import annotations

from ._backend import Batch, BranchRecord
from .errors import ConflictError

__all__ = ["fork_target_conflict", "skips_undo"]


def skips_undo(batch: Batch, anything_hidden: bool) -> bool:
    """Whether ``batch`` is an undo of a rewind with nothing hidden to bring back (the
    backend then skips it entirely, records nothing and writes nothing)."""
    return batch.rewind is not None and batch.rewind.hide_after is None and not anything_hidden


def fork_target_conflict(
    session_id: str,
    branch: BranchRecord,
    *,
    holds_items: bool,
    holds_hidden: bool,
    fork_of: tuple[str, int] | None,
) -> ConflictError | None:
    """The error that refuses writing the fork ``branch`` into ``session_id``, or
    ``None`` if the target is fresh.

    Read by the backend in the fork's transaction: ``holds_items``, whether an item of
    another batch is stored in the target; ``holds_hidden``, whether a rewind hid items
    of it; ``fork_of``, its own fork record (source id, at turn), if any.
    """
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
