"""Helpers many test files share, written once."""

from __future__ import annotations

from typing import Any

from tests.provision import Provision


def msg(text: str, role: str = "user", **extra: Any) -> dict[str, Any]:
    """A message item: ``{"role": role, "content": text}`` plus ``extra`` keys."""
    return {"role": role, "content": text, **extra}


async def age(target: Provision, session_id: str, seconds: int) -> None:
    """Move the session's ``updated_at`` ``seconds`` into the past."""
    await target.execute(
        f"UPDATE txs_sessions SET updated_at = {target.ago('updated_at', seconds)} "
        f"WHERE session_id = {target.param(1)}",
        session_id,
    )
