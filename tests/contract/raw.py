"""Raw reads and corruption of a test target's rows, bypassing the package.

The backend-specific parts (placeholders, connections, triggers) are the target's own
methods (``tests/provision/``); what is here reads the same on every backend.
"""

from __future__ import annotations

from tests.conftest import Target


async def stored_rows(target: Target, session_id: str) -> int:
    """How many items of the session a reader sees right now (even while a writer
    holds the database)."""
    count = await target.fetch_value(
        f"SELECT count(*) FROM txs_items WHERE session_id = {target.param(1)}", session_id
    )
    return int(count)


async def corrupt_newest(target: Target, session_id: str, text: str = "{not json") -> None:
    """Overwrite the newest stored item of a session with ``text``."""
    p1, p2 = target.param(1), target.param(2)
    await target.execute(
        f"UPDATE txs_items SET data = {p1} WHERE session_id = {p2} AND seq = "
        f"(SELECT max(seq) FROM txs_items WHERE session_id = {p2})",
        text,
        session_id,
    )


async def forget_turn_records(target: Target, session_id: str) -> None:
    """Make a session's stored items what a store from before turn records holds after
    its migrations: no turn records, and a turn index (migration 7's backfill) in which
    no record holds an item."""
    p1 = target.param(1)
    await target.execute(f"DELETE FROM txs_turns WHERE session_id = {p1}", session_id)
    await target.execute(
        f"UPDATE txs_sessions SET turn_count = 0, turn_items = 0 WHERE session_id = {p1}",
        session_id,
    )
