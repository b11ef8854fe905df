"""PostgreSQL backend (asyncpg): :class:`PostgresBackend`, one pool per store, one round
trip per common commit.

The backend only loads rows and applies batches; staging, retries and outcome
resolution live in the core (:mod:`sessions._engine.commit`, :mod:`sessions._engine.session`).

* A batch of items only (the common turn) is ONE statement: data-modifying CTEs record
  the batch id (``ON CONFLICT DO NOTHING``), bump the session row (which locks it and
  hands out a contiguous ``seq`` range) only if the id was new, and insert the items
  from ``unnest($n::text[]) WITH ORDINALITY``; appends of many sessions share one
  round trip (group commit, :mod:`.group`).
* Pops and clears run in an explicit transaction that first locks the session row in
  a statement of its own, so that every later statement of that transaction (under
  READ COMMITTED each takes a fresh snapshot) sees every item committed before the
  lock was granted.

The class is put together from parts over :class:`~.connect.Connections` (the pool and
the operations in flight): :class:`~.group.GroupPart` (appends, grouped),
:class:`~.admin.AdminPart` (store operations), :class:`~.index.IndexPart` (the turn
index as ``sessions doctor`` checks and repairs it) and :class:`~.schema.SchemaPart`
(migrations); the commit's transaction and the reads stay here.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from .._engine.group import Entry
from .._model.backend import Batch, BranchRow, InfoChange, Row, TurnRow, TurnUsage, TurnWindow
from .._model.catalogue import check_life
from .._model.decide import Plan, Snapshot, decide, key_limit, needs_snapshot, undoes
from ..errors import StoreClosedError
from .admin import AdminPart
from .faults import _Phase
from .group import GroupPart
from .index import IndexPart
from .schema import SchemaPart
from .sql import _turn_args
from .windows import TURN_WALK_MAX

__all__ = ["PostgresBackend"]


class PostgresBackend(GroupPart, AdminPart, IndexPart, SchemaPart):
    """Stores batches in PostgreSQL through an asyncpg pool.

    ``owns_pool`` decides whether :meth:`close` closes the pool; a borrowed pool stays
    open (close only waits for this backend's operations in flight).
    """

    atomic = True
    idempotent = True

    async def load(self, session_id: str, limit: int | None) -> list[Row]:
        if limit is None:
            rows = await self._fetch("read", self._sql.load_all, session_id)
        else:
            rows = await self._fetch("read", self._sql.load_tail, session_id, limit)
        return rows  # asyncpg Records index and unpack like (seq, data) tuples

    async def apply(self, session_id: str, batches: Sequence[Batch]) -> None:
        """Apply ``batches`` in one transaction (see :class:`~sessions.Backend`).

        Append-only commits of many sessions that arrive together share one statement
        (group commit); each still succeeds or fails alone. Cancelling a call whose
        commit is in flight together with others' leaves it to finish: its outcome is
        then unknown to the caller (the core treats a cancelled ``apply`` so anyway).
        """
        if not batches:
            return
        if self._closed:
            raise StoreClosedError("PostgreSQL commit: the store is closed")
        if any(
            b.clear
            or b.pops
            or b.restore_times is not None
            or not b.plain
            or (b.incarnation is not None and not b.items)
            for b in batches
        ):
            await self._run(
                "commit", lambda conn, phase: self._transact(conn, phase, session_id, batches)
            )
            return
        await self._append(Entry(session_id, batches))

    async def _transact(
        self, conn: Any, phase: _Phase, session_id: str, batches: Sequence[Batch]
    ) -> None:
        await conn.execute("BEGIN")
        life = await conn.fetchval(self._sql.lock, session_id)
        written = False
        for batch in batches:
            plan = None
            if needs_snapshot(batch):
                snapshot = await self._snapshot(conn, session_id, batch, life)
                plan = decide(session_id, batch, snapshot)
                if plan is None:
                    continue  # already applied, or an undo with nothing to undo
            else:
                check_life(session_id, batch, life)
            written = True
            recorded, _removed = await conn.fetchrow(
                self._sql.batch,
                session_id,
                batch.batch_id,
                batch.clear,
                list(batch.pops),
                list(batch.items),
                len(batch.items),
                *_turn_args(batch),
            )
            if recorded and batch.restore_times is not None:
                await conn.execute(self._sql.restore_times, session_id, *batch.restore_times)
            if recorded and plan is not None:
                await self._write_plan(conn, session_id, batch, plan)
        if not written:  # the lock may have made the session row: keep nothing
            await conn.execute("ROLLBACK")
            return
        phase.commit_sent = True
        await conn.execute("COMMIT")

    async def _snapshot(
        self, conn: Any, session_id: str, batch: Batch, life: str | None
    ) -> Snapshot:
        """What :func:`~sessions._model.decide.decide` needs for ``batch``, read in this
        transaction (which holds the session row lock; ``life``: the session's life the
        lock found, ``None`` if it made the row)."""
        row = await conn.fetchrow(
            self._sql.snapshot,
            session_id,
            batch.batch_id,
            list(batch.pops),
            batch.tail,
            key_limit(batch),
            undoes(batch),
            batch.run_state is not None,
            batch.branch is not None,
        )
        return Snapshot(
            applied=row[0],
            life=life,
            version=int(row[1]),
            pops_stored=int(row[2]),
            after_tail=tuple(row[3]),
            newest_rewind=row[4],
            after_hidden=tuple(row[5]),
            run_state_version=int(row[6]),
            stored=tuple(row[7]),
            fork_of=None if row[8] is None else (row[8], int(row[9])),
        )

    async def _write_plan(self, conn: Any, session_id: str, batch: Batch, plan: Plan) -> None:
        """A batch's catalogue, run-state, quarantine, fork and rewind writes, as planned
        (after the batch statement, in its transaction, which holds the session row lock:
        no other commit of this session can interleave)."""
        sql = self._sql
        if batch.info is not None:
            await self._write_info(conn, session_id, batch.info)
        change = batch.run_state
        if change is not None:
            await conn.execute(
                sql.run_state_write, session_id, plan.run_state_version, change.text, change.label
            )
        if batch.quarantine:
            reasons = [reason for reason, _ in batch.quarantine]
            texts = [text for _, text in batch.quarantine]
            await conn.execute(sql.quarantine, session_id, batch.batch_id, reasons, texts)
        if batch.branch is not None:
            await conn.execute(sql.branch, batch.branch.source_id, session_id, batch.branch.at_turn)
        if plan.hide_as is not None:
            assert batch.rewind is not None
            await conn.execute(sql.hide, session_id, plan.hide_as, batch.rewind.hide_after)
        elif plan.bring_back is not None:
            await conn.execute(sql.unhide, session_id, plan.bring_back)

    async def _write_info(self, conn: Any, session_id: str, change: InfoChange) -> None:
        names = sorted(change.fields)
        values = [getattr(change, name) for name in names]
        values = [list(v) if name == "tags" else v for name, v in zip(names, values, strict=True)]
        columns = ", ".join(f"{name} = ${i}" for i, name in enumerate(names, start=2))
        await conn.execute(
            self._names.sql(f"UPDATE {{sessions}} SET {columns} WHERE session_id = $1"),
            session_id,
            *values,
        )
        if "tags" in change.fields:
            await conn.execute(self._sql.tags_delete, session_id)
            await conn.execute(self._sql.tags_insert, session_id, list(change.tags))
        elif "user_id" in change.fields:
            await conn.execute(self._sql.tags_user, session_id, change.user_id)

    async def load_run_state(self, session_id: str) -> tuple[str | None, int, str | None]:
        rows = await self._fetch("read", self._sql.run_state_load, session_id)
        return (None, 0, None) if not rows else (rows[0][0], int(rows[0][1]), rows[0][2])

    async def load_turns(self, session_id: str) -> tuple[list[TurnRow], list[int]]:
        rows = await self._fetch("read", self._sql.turns_load, session_id)
        keys, records = rows[0]
        turns = [
            TurnRow(r[0], r[1], r[2], r[3], None if r[4] is None else TurnUsage(*r[4:]))
            for r in records
        ]
        return turns, list(keys)

    async def load_turn_window(
        self, session_id: str, *, oldest: int | None = None, newest: int | None = None
    ) -> TurnWindow | None:
        wanted = oldest if newest is None else newest
        sql = self._sql
        if wanted is not None and wanted <= TURN_WALK_MAX:
            statement = sql.turns_oldest_walk if newest is None else sql.turns_newest_walk
        else:
            statement = sql.turns_oldest if newest is None else sql.turns_newest
        rows = await self._fetch("read", statement, session_id, wanted)
        item_count, turn_count, turn_items, records = rows[0]
        if item_count is None:
            return TurnWindow(0, ())  # no session row
        if turn_items != item_count:
            return None  # items no visible record covers: the full path
        found = [
            TurnRow(
                r[10],
                r[11],
                r[2],
                r[3],
                None if r[4] is None else TurnUsage(*r[4:9]),
                int(r[9]),
            )
            for r in records
        ]
        if newest is not None:
            found.reverse()
        return TurnWindow(int(turn_count), tuple(found))

    async def usage_totals(
        self, session_id: str | None, since: datetime | None
    ) -> tuple[TurnUsage, int]:
        if since is not None and since.tzinfo is None:
            since = since.replace(tzinfo=timezone.utc)
        rows = await self._fetch("read", self._sql.usage, session_id, since)
        row = rows[0]
        return TurnUsage(*(int(value) for value in row[:5])), int(row[5])

    async def load_branches(self, source_id: str) -> list[BranchRow]:
        rows = await self._fetch("read", self._sql.branches_load, source_id)
        return [BranchRow(row[0], int(row[1]), row[2]) for row in rows]

    async def applied(self, session_id: str, batch_ids: Sequence[str]) -> set[str]:
        """Which of ``batch_ids`` are committed, waiting for any commit still in flight.

        A plain ``SELECT`` cannot see a transaction that is still running on the
        server (say, a statement whose connection we lost while it waited for a lock):
        it would answer "not applied" and that transaction could commit a moment
        later. So this inserts the ids in a transaction that is always rolled back:
        inserting a key that an unfinished transaction inserted waits for it to end.
        Ids that conflict are applied; the others are not (and nothing is written).
        """
        if not batch_ids:
            return set()
        ids = list(dict.fromkeys(batch_ids))

        async def run(conn: Any, phase: _Phase) -> set[str]:
            await conn.execute("BEGIN")
            fresh = await conn.fetch(self._sql.probe, session_id, ids)
            await conn.execute("ROLLBACK")
            return set(ids) - {row[0] for row in fresh}

        return await self._run("read", run)

    async def load_versioned(
        self, session_id: str, limit: int | None
    ) -> tuple[list[Row], int, str | None]:
        rows = await self._fetch("read", self._sql.load_versioned, session_id, limit)
        stored = [(row[2], row[3]) for row in rows if row[2] is not None]
        return stored, int(rows[0][0]), rows[0][1]
