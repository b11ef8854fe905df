"""Bulk writes (import, migration): one session's items in chunks, through the commit path.

Each chunk is one batch whose id is derived from the writer's namespace, the session,
the position of the chunk's first item in the source and the chunk's content
(:func:`~sessions._engine.commit.derived_batch_id`). Backends apply a batch id at most once,
so writing the same source again, or resuming an interrupted write at a chunk boundary,
adds nothing twice. The records of these ids are never pruned
(:meth:`~sessions.Store.prune_batch_records`), so that stays true however late the
rerun comes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .._model.backend import Batch, BranchRecord, InfoChange, TurnRecord
from .commit import derived_batch_id, write_batches

if TYPE_CHECKING:
    from .store import Store

__all__ = ["CHUNK_BYTES", "CHUNK_ITEMS", "ChunkWriter"]

CHUNK_ITEMS = 500
CHUNK_BYTES = 4 * 1024 * 1024

Progress = Callable[[int], None]


class ChunkWriter:
    """Appends one session's items in idempotent chunks; counts what was new.

    ``position`` is where the next item sits in the source's history of the session
    (0 for a fresh copy; the number of items already copied when resuming).
    ``restore_times`` (with ``total``, the number of items the source has) goes on the
    chunk that ends at ``total``: that chunk gives the session its source's times.
    """

    def __init__(
        self,
        store: Store[Any],
        session_id: str,
        namespace: str,
        *,
        position: int = 0,
        chunk_items: int = CHUNK_ITEMS,
        chunk_bytes: int = CHUNK_BYTES,
        progress: Progress | None = None,
        total: int | None = None,
        restore_times: tuple[datetime, datetime] | None = None,
    ) -> None:
        self.store = store
        self.session_id = session_id
        self.namespace = namespace
        self.position = position
        self.chunk_items = chunk_items
        self.chunk_bytes = chunk_bytes
        self.progress = progress
        self.total = total
        self.restore_times = restore_times
        #: The session's catalogue entry, written with the marker (import of a new one).
        self.info: InfoChange | None = None
        self.added = 0
        self.already_present = 0
        self._pending: list[str] = []
        self._bytes = 0

    def marker_id(self, *facts: str) -> str:
        """The id of a marker batch (no items) of this writer for the session.

        Without ``facts``, the one marker of the session; ``facts`` tell apart markers
        of different contents or kinds (import: how and what it imported).
        """
        return derived_batch_id(self.namespace, self.session_id, -1, facts)

    async def has_marker(self, *facts: str) -> bool:
        """Whether this marker was written to the session before."""
        return await self.present(self.marker_id(*facts))

    async def mark(self, *facts: str, branch: BranchRecord | None = None) -> None:
        """Write the marker batch (creates the session, even without items). Idempotent.

        A session without items takes ``restore_times`` from its marker. ``branch``
        records the session as a branch of another, with the marker.
        """
        times = self.restore_times if self.total == 0 else None
        batch = Batch(self.marker_id(*facts), False, (), (), times, info=self.info, branch=branch)
        if not await self.present(batch.batch_id):
            await self._write(batch)

    async def add(self, text: str) -> None:
        """Queue one encoded item; writes a chunk when it is full."""
        self._pending.append(text)
        self._bytes += len(text)
        if len(self._pending) >= self.chunk_items or self._bytes >= self.chunk_bytes:
            await self.flush()

    async def flush(self, turn: TurnRecord | None = None) -> None:
        """Write the queued items as one chunk (nothing if none are queued); ``turn``
        goes with it (a migrated turn: its usage)."""
        texts, self._pending, self._bytes = self._pending, [], 0
        if not texts:
            return
        batch_id = derived_batch_id(self.namespace, self.session_id, self.position, texts)
        last = self.total is not None and self.position + len(texts) == self.total
        if await self.present(batch_id):
            self.already_present += len(texts)
        else:
            times = self.restore_times if last else None
            await self._write(Batch(batch_id, False, (), tuple(texts), times, turn=turn))
            self.added += len(texts)
        self.position += len(texts)
        if self.progress is not None:
            self.progress(len(texts))

    async def present(self, *batch_ids: str) -> bool:
        """Whether any of ``batch_ids`` is recorded as applied to the session."""
        self.store.check_usable("import/migrate")
        found = await self.store.backend.applied(self.session_id, list(batch_ids))
        return bool(found)

    async def _write(self, batch: Batch) -> None:
        await write_batches(self.store, self.session_id, [batch])
