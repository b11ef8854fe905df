"""What crosses the activity boundary between a workflow's session and the worker's
store, and what a workflow hands to its continue-as-new run. Plain dataclasses of ids,
counts and item texts (Temporal's data converters encode them as JSON); no ``temporalio``.

What the workflow history holds because of a session: each load's items (once per run:
the session keeps them), each commit's staged items and ids, and counts back. Never the
whole conversation per commit, never a whole conversation in a continue-as-new input.
"""

from dataclasses import dataclass, field

__all__ = ["CommitRequest", "CommitResult", "LoadRequest", "LoadResult", "SessionCarry"]


@dataclass(frozen=True)
class SessionCarry:
    """A workflow's session, handed on to its continue-as-new run
    (:meth:`~sessions.temporal.TemporalSession.carry`): ids and counts, no items."""

    session_id: str
    lineage: str
    """The workflow execution chain the session's turns are tagged with (``ids.py``)."""
    position: int
    """How many commits the chain has made: the next one is ``position + 1``."""


@dataclass(frozen=True)
class LoadRequest:
    session_id: str
    limit: int | None
    lineage: str
    next_position: int
    """Turns of ``lineage`` from this position on belong to a run that a reset (or a
    retry of the workflow) replaced: hidden before reading (``docs/temporal.md``)."""


@dataclass(frozen=True)
class LoadResult:
    items: list[str]
    """The stored items' JSON texts, oldest first (the latest ``limit``)."""
    complete: bool
    """``True``: this is the whole stored history (fewer than ``limit`` items)."""
    trim: bool
    """Whether limited reads drop an orphan output at their start (``integrity``)."""
    hidden: int = 0
    """Turns of a replaced run hidden before reading."""


@dataclass(frozen=True)
class CommitRequest:
    session_id: str
    batch_id: str
    lineage: str
    position: int
    clear: bool
    pops: int
    """How many stored items to remove from the end, before appending ``items``."""
    items: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CommitResult:
    applied_before: bool
    """``True``: an earlier attempt of this commit had already applied the batch."""
    quarantined: int
    """Items the store's ``integrity="quarantine"`` kept out of the history."""
    hidden: int = 0
    """Turns of a replaced run hidden before committing."""
