"""The catalogue entry of :class:`~sessions.BufferedSession`: ``set_info()`` stages a
change of it with the next commit (``docs/catalogue.md``).
"""

from __future__ import annotations

from typing import Any

from ..._model.backend import CatalogueBackend
from ..._model.catalogue import KEEP, info_change
from ...errors import SessionError
from .plumbing import SessionPlumbing

__all__ = ["CataloguePart"]


class CataloguePart(SessionPlumbing):
    """``set_info()``."""

    def set_info(
        self,
        *,
        user_id: Any = KEEP,
        title: Any = KEEP,
        tags: Any = KEEP,
        metadata: Any = KEEP,
        ttl: Any = KEEP,
    ) -> None:
        """Stage a change of this session's catalogue entry, applied by the next commit
        in the same transaction as the items staged with it (or alone).

        ``user_id`` and ``title``: a str (``None`` clears it); ``tags``: a collection of
        short str (stored as a sorted set; ``None`` or empty: none); ``metadata``: a
        JSON object (a dict with str keys, nested at most 32 levels; ``None`` clears
        it); ``ttl``: a ``timedelta`` of at most 100 years, this session's idle
        time-to-live for :meth:`~sessions.Store.purge` (``None``: the store's default).
        Text must be valid Unicode without NUL. Fields not given stay as they are. Validated now (a
        ``TypeError`` or ``ValueError`` names what is wrong; nothing is staged then).
        Never suspends; with ``autocommit`` it waits for the next write or ``commit()``.
        """
        self._check_open("set_info")
        change = info_change(user_id=user_id, title=title, tags=tags, metadata=metadata, ttl=ttl)
        store = self.store
        if store is not None and not isinstance(store.backend, CatalogueBackend):
            raise SessionError(
                f"set_info() on session {self.session_id!r}: "
                f"{type(store.backend).__name__} keeps no session catalogue"
            )
        if not self._refuse_late_write("set_info", 1):
            self._staging.set_info(change)
