"""The conflicts a backend raises while applying a batch, each built once.

A backend reads what a batch's conditions need inside its transaction and raises one
of these when a condition does not hold; the text is written here, so every backend
says the same thing (``docs/architecture.md``: backends store and load, the core
decides and names the error).
"""

from __future__ import annotations

from .errors import ConflictError

__all__ = ["pops_gone", "run_state_moved", "tail_moved", "undo_blocked"]


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
