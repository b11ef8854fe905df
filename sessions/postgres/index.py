"""The PostgreSQL backend's turn index as ``sessions doctor`` checks and repairs it
(:class:`~sessions._model.turnindex.TurnIndexBackend`): the facts read in one statement,
the counts the core derives from them (:func:`sessions._model.turnindex.index_repair`)
written in one transaction that holds the session row."""

from __future__ import annotations

from typing import Any

from .._model.turnindex import TurnIndexFacts, facts_of_rows, index_repair
from .connect import Connections
from .faults import _Phase

__all__ = ["IndexPart"]

# One statement (one snapshot): the session's counts, then each turn record (none: one
# row of NULLs) with its count and the items and hidden items its range holds.
_FACTS = (
    "SELECT s.turn_count, s.turn_items, t.first_seq, t.last_seq, t.hidden_by IS NOT NULL, "
    "t.items, (SELECT count(*) FROM {items} AS i WHERE i.session_id = t.session_id "
    "AND i.seq BETWEEN t.first_seq AND t.last_seq), "
    "(SELECT count(*) FROM {hidden} AS h WHERE h.session_id = t.session_id "
    "AND h.seq BETWEEN t.first_seq AND t.last_seq) "
    "FROM {sessions} AS s LEFT JOIN {turns} AS t ON t.session_id = s.session_id "
    "WHERE s.session_id = $1 ORDER BY t.first_seq"
)
# Every write of a session locks its row first (or, a plain append, in its one
# statement): the statements after this one see every commit made before it.
_LOCK = "SELECT 1 FROM {sessions} WHERE session_id = $1 FOR UPDATE"
_SET_RECORD = "UPDATE {turns} SET items = $3 WHERE session_id = $1 AND first_seq = $2"
_SET_SESSION = "UPDATE {sessions} SET turn_count = $2, turn_items = $3 WHERE session_id = $1"


class IndexPart(Connections):
    """``load_turn_index`` and ``repair_turn_index``."""

    async def load_turn_index(self, session_id: str) -> TurnIndexFacts | None:
        return facts_of_rows(await self._fetch("read", self._names.sql(_FACTS), session_id))

    async def repair_turn_index(self, session_id: str) -> TurnIndexFacts | None:
        names = self._names

        async def run(conn: Any, phase: _Phase) -> TurnIndexFacts | None:
            await conn.execute("BEGIN")
            if await conn.fetchval(names.sql(_LOCK), session_id) is None:
                await conn.execute("ROLLBACK")
                return None
            facts = facts_of_rows(await conn.fetch(names.sql(_FACTS), session_id))
            assert facts is not None  # the row is locked
            repair = index_repair(facts)
            if repair.records:
                await conn.executemany(
                    names.sql(_SET_RECORD),
                    [(session_id, first_key, items) for first_key, items in repair.records],
                )
            if repair.session is not None:
                await conn.execute(names.sql(_SET_SESSION), session_id, *repair.session)
            phase.commit_sent = True
            await conn.execute("COMMIT")
            return facts

        return await self._run("repair_turn_index", run)
