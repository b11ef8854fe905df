"""Turns of :class:`~sessions.BufferedSession`: run ids, usage, the turn list, forks,
rewinds (``docs/turns.md``).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ..._model.backend import (
    Batch,
    BranchBackend,
    RewindChange,
    TurnBackend,
    TurnUsage,
    new_batch_id,
)
from ..._model.turns import Turn, coerce_usage
from ..._model.validate import (
    check_text,
    validate_limit,
    validate_positive_int,
    validate_session_id,
)
from ...errors import SessionError
from ..branching import Branch, StoredTurns, fork_history, list_branches, refuse_split
from ..commit import apply_batches
from .plumbing import SessionPlumbing

__all__ = ["TurnsPart"]


class TurnsPart(SessionPlumbing):
    """Turns: ``set_run_id``, ``record_usage``, ``turns``, ``usage``, ``fork``,
    ``branches``, ``rewind``, ``undo_rewind``."""

    def set_run_id(self, run_id: str | None) -> None:
        """Tag the turns staged from now on with ``run_id`` (``None``: no run id).

        Items staged by ``add_items`` take the run id set when the first of them is
        staged; each commit that adds items records one turn (:meth:`turns`). Never
        suspends, never touches the database. ``run_id``: 1 to 256 characters of valid
        Unicode (no lone surrogate) without NUL, refused now (``ValueError``) rather
        than by every later commit.
        """
        self._check_open("set_run_id")
        if run_id is not None:
            if not isinstance(run_id, str):
                raise TypeError(f"run_id must be a str or None, got {type(run_id).__name__}")
            if not run_id or len(run_id) > 256:
                raise ValueError(f"run_id must be 1 to 256 characters, got {len(run_id)}")
            check_text(run_id, "run_id")
        self._turn_support("set_run_id")
        self._staging.run_id = run_id

    @property
    def run_id(self) -> str | None:
        """The run id turns staged now carry (:meth:`set_run_id`)."""
        return self._staging.run_id

    async def turns(self, *, last: int | None = None) -> list[Turn]:
        """The history's turns, oldest first: one per commit that added items (see
        ``docs/turns.md``), then the staged items as one pending turn.

        ``last=N``: only the newest ``N`` of them (the pending one counts), numbered as
        in the whole list: ``turns()[-N:]``, read from the turn index, so it costs what
        it returns however long the session (``docs/turns.md``). ``0``: ``[]``.
        """
        self._check_open("turns")
        count = validate_limit(last, "last")
        if count == 0:
            return []
        async with self._lock:
            await self._settle("turns")
            if count is None:
                return await self._turn_list("turns")
            return (await self._newest_turns("turns", count))[0]

    async def fork(self, new_session_id: str, *, at_turn: int | None = None) -> int:
        """Make ``new_session_id`` a new session holding this session's turns 1 to
        ``at_turn`` (all its turns when ``None``); return how many turns it holds.

        One transaction through the commit path. A copy (``docs/turns.md`` says why): the
        fork keeps its history whatever happens to this session later. Refused while this
        session has staged changes (commit or roll back first), and with ``ValueError``
        when turn ``at_turn`` splits a tool call from its output (call up to it, output
        after it).

        The target must be fresh, checked in the transaction that writes the fork: no
        stored items, no hidden (rewound) turns, never the target of a fork before (a
        catalogue entry is kept; a cleared ordinary session is fresh again). Otherwise
        :class:`~sessions.errors.CommitConflictError` naming the target and the reason,
        nothing applied; of concurrent forks into one id exactly one succeeds. The same
        fork again (same source history, same ``at_turn``) returns ``at_turn`` and writes
        nothing while the target still holds those turns, and is refused the same way once
        it lost any. Open the fork with ``store.session(new_session_id)``;
        :meth:`branches` lists it.
        """
        self._check_open("fork")
        new_id = validate_session_id(new_session_id, "new_session_id")
        if at_turn is not None:
            validate_positive_int(at_turn, "at_turn")
        async with self._commit_lock("fork"):
            await self._settle("fork")
            self._refuse_staged("fork")
            store = await self._ready_store("fork")
            return await fork_history(store, self.session_id, new_id, at_turn)

    async def rewind(self, to_turn: int) -> int:
        """Hide the turns after turn ``to_turn`` (``0``: all); return how many were hidden.

        One commit of its own (shielded, idempotent like any): reads, ``limit``,
        :meth:`turns` and forks no longer see the hidden turns, which are kept, not
        deleted, until :meth:`undo_rewind` brings them back or a clear removes them.
        Whole turns only; a ``to_turn`` that splits a tool call from its output (an
        approval: call up to it, output after it) is refused with ``ValueError``, nothing
        applied. Refused while this session has staged changes;
        :class:`~sessions.errors.CommitConflictError` (nothing applied) if another writer
        committed since the turns were read.
        """
        self._check_open("rewind")
        if isinstance(to_turn, bool) or not isinstance(to_turn, int):
            raise TypeError(f"to_turn must be an int, got {type(to_turn).__name__}")
        if to_turn < 0:
            raise ValueError(f"to_turn must be >= 0, got {to_turn}")
        return await self._shield(lambda: self._rewind_now("rewind", to_turn), known=False)

    async def undo_rewind(self) -> int:
        """Bring back the turns the newest :meth:`rewind` hid; return how many came back.

        ``0`` when nothing is hidden, and then nothing is written at all: the version and
        ``updated_at`` stay, a session that does not exist is not created. Several
        rewinds are undone newest first. Refused
        with :class:`~sessions.errors.CommitConflictError` (nothing applied) once a turn
        has been committed after the rewind (it would interleave with the hidden ones:
        :meth:`fork` the history you want instead).
        """
        self._check_open("undo_rewind")
        return await self._shield(lambda: self._rewind_now("undo_rewind", None), known=False)

    async def _hide_after_turn(self, to_turn: int) -> int:
        """:meth:`rewind`, also where ``to_turn`` splits a tool call from its output: a
        writer that restores the history as it stood at an earlier point
        (``sessions.temporal`` after a workflow reset), where a call waiting for its
        output (an approval) is what the history held then."""
        self._check_open("rewind")
        return await self._shield(
            lambda: self._rewind_now("rewind", to_turn, split_ok=True), known=False
        )

    async def _rewind_now(self, operation: str, to_turn: int | None, split_ok: bool = False) -> int:
        async with self._commit_lock(operation):
            await self._settle(operation)
            self._refuse_staged(operation)
            store = await self._ready_store(operation)
            if not isinstance(store.backend, BranchBackend):
                raise SessionError(
                    f"{operation}() on session {self.session_id!r}: "
                    f"{type(store.backend).__name__} cannot rewind"
                )
            # No staged changes: the turns are the stored ones, read from the newest as
            # far as the cut (docs/turns.md: what a rewind costs).
            backend = await self._turn_backend(operation)
            turns = await StoredTurns.read(
                backend, self.session_id, operation, newest=0 if to_turn is None else 1
            )
            tail = None
            if to_turn is not None:
                if to_turn > turns.count:
                    raise ValueError(
                        f"rewind(): to_turn must be from 0 to {turns.count} (the turns of "
                        f"session {self.session_id!r}), got {to_turn}"
                    )
                if to_turn == turns.count:
                    return 0
                # Turn to_turn and the turns it hides (read once: the split check reuses them)
                last = await turns.tail(turns.count - to_turn + 1 if to_turn else 1)
                if not split_ok:
                    await refuse_split(backend, self.session_id, turns, to_turn, operation)
                tail = last[-1].last_key
                after = last[0].last_key if to_turn else 0
            change = RewindChange(after if to_turn is not None else None)
            batch = Batch(
                new_batch_id(), False, (), (), tail=tail, rewind=change, incarnation=self._life
            )
            outcome = await apply_batches(store, self.session_id, [batch])
            if outcome.error is not None:
                raise outcome.error
            if to_turn is not None:
                return turns.count - to_turn
            again = await StoredTurns.read(backend, self.session_id, operation, newest=0)
            return again.count - turns.count

    def record_usage(self, usage: Any) -> None:
        """Record model usage with the turn being staged (same commit, same transaction).

        ``usage``: an agents ``Usage`` (``result.context_wrapper.usage``) or a
        :class:`~sessions.TurnUsage`; requests, input, output, cached and reasoning tokens
        are kept, each an ``int`` from 0 to 2**63 - 1 (a ``ValueError`` names a larger
        one, also when the staged turns' usages would add up past it; nothing is
        recorded then). Called twice for one turn, the usages add up. Needs staged items to
        attach to (inside ``transaction()``, after the run): without any it raises
        :class:`~sessions.errors.SessionError` (with autocommit the items are already
        committed). Never suspends.
        """
        self._check_open("record_usage")
        counts = coerce_usage(usage)
        self._turn_support("record_usage")
        if self._refuse_late_write("record_usage", 1):
            return
        if not self._staging.add_usage(counts):
            raise SessionError(
                f"record_usage() on session {self.session_id!r}: no staged items to record "
                "it with (call it after the run, before the commit, without autocommit)"
            )

    async def usage(self, *, since: datetime | None = None) -> TurnUsage:
        """The model usage recorded with this session's turns (``record_usage``), summed:
        hidden (rewound) turns and turns whose items were popped included, forks' not;
        only turns committed at or after ``since`` when given."""
        self._check_open("usage")
        backend = await self._turn_backend("usage")
        total, _ = await backend.usage_totals(self.session_id, _utc(since, "since"))
        return total

    async def branches(self) -> list[Branch]:
        """The sessions forked from this one (:meth:`fork`), oldest first."""
        self._check_open("branches")
        return await list_branches(await self._ready_store("branches"), self.session_id)

    def _turn_support(self, operation: str) -> None:
        store = self.store
        if store is not None and not isinstance(store.backend, TurnBackend):
            raise SessionError(
                f"{operation}() on session {self.session_id!r}: "
                f"{type(store.backend).__name__} does not record turns"
            )


def _utc(moment: object, name: str) -> datetime | None:
    """``None``, or an aware ``datetime`` (a naive one is taken as UTC)."""
    if moment is None:
        return None
    if not isinstance(moment, datetime):
        raise TypeError(f"{name} must be a datetime or None, got {type(moment).__name__}")
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)
