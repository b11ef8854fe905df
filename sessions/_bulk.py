"""Bulk writes (import, migration): one session's items in chunks, through the commit path.

Each chunk is one batch whose id is derived from the writer's namespace, the session,
the position of the chunk's first item in the source and the chunk's content
(:func:`~sessions._commit.derived_batch_id`). Backends apply a batch id at most once,
so writing the same source again, or resuming an interrupted write at a chunk boundary,
adds nothing twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._backend import Batch
from ._commit import derived_batch_id, write_batches

if TYPE_CHECKING:
    from ._store import Store

__all__ = ["CHUNK_BYTES", "CHUNK_ITEMS", "ChunkWriter"]

CHUNK_ITEMS = 500
CHUNK_BYTES = 4 * 1024 * 1024

Progress = Callable[[int], None]


class ChunkWriter:
    """Appends one session's items in idempotent chunks; counts what was new.

    ``position`` is where the next item sits in the source's history of the session
    (0 for a fresh copy; the number of items already copied when resuming).
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
    ) -> None:
        self.store = store
        self.session_id = session_id
        self.namespace = namespace
        self.position = position
        self.chunk_items = chunk_items
        self.chunk_bytes = chunk_bytes
        self.progress = progress
        self.added = 0
        self.already_present = 0
        self._pending: list[str] = []
        self._bytes = 0

    def marker_id(self) -> str:
        """The id of this writer's marker batch for the session (no items)."""
        return derived_batch_id(self.namespace, self.session_id, -1, ())

    async def has_marker(self) -> bool:
        """Whether this kind of writer has written to the session before."""
        return await self._present(self.marker_id())

    async def mark(self) -> None:
        """Write the marker batch (creates the session, even without items). Idempotent."""
        batch = Batch(self.marker_id(), False, (), ())
        if not await self._present(batch.batch_id):
            await self._write(batch)

    async def add(self, text: str) -> None:
        """Queue one encoded item; writes a chunk when it is full."""
        self._pending.append(text)
        self._bytes += len(text)
        if len(self._pending) >= self.chunk_items or self._bytes >= self.chunk_bytes:
            await self.flush()

    async def flush(self) -> None:
        """Write the queued items as one chunk (nothing if none are queued)."""
        texts, self._pending, self._bytes = self._pending, [], 0
        if not texts:
            return
        batch_id = derived_batch_id(self.namespace, self.session_id, self.position, texts)
        if await self._present(batch_id):
            self.already_present += len(texts)
        else:
            await self._write(Batch(batch_id, False, (), tuple(texts)))
            self.added += len(texts)
        self.position += len(texts)
        if self.progress is not None:
            self.progress(len(texts))

    async def _present(self, batch_id: str) -> bool:
        self.store.check_usable("import/migrate")
        backend = self.store.backend
        return batch_id in await backend.applied(self.session_id, [batch_id])

    async def _write(self, batch: Batch) -> None:
        await write_batches(self.store, self.session_id, [batch])
