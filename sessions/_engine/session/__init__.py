"""``BufferedSession``: the Agents SDK ``Session`` protocol over any backend, buffered.

Writes are staged (:mod:`sessions._model.staging`) and made durable by ``commit()`` through
the one commit path (:mod:`sessions._engine.commit`), inside a bounded shield
(:mod:`sessions._engine.shield`). Reads see stored history followed by the staged changes.

The class is put together from feature parts, one per module of this package, each a base
class over the shared state (``core.py``) and the read and commit paths (``plumbing.py``):
``protocol.py``, ``transactions.py``, ``turns.py``, ``catalogue.py``, ``runstate.py`` and
``compaction.py`` (built on ``protocol.py``: see its ``_offers_hook``). Each method is
written once, in one part; none overrides another part's.
"""

from __future__ import annotations

from .catalogue import CataloguePart
from .compaction import CompactionPart
from .runstate import RunStatePart, RunStateRecord
from .transactions import TransactionPart
from .turns import TurnsPart

__all__ = ["BufferedSession", "RunStateRecord"]


class BufferedSession(CompactionPart, TurnsPart, RunStatePart, CataloguePart, TransactionPart):
    """A conversation history whose writes are staged in memory until ``commit()``.

    Implements the Agents SDK ``Session`` protocol (``get_items``, ``add_items``,
    ``pop_item``, ``clear_session``) and adds ``commit``, ``rollback``,
    ``transaction()``, ``pending`` / ``has_pending`` and ``close``.

    Backends provide concrete subclasses (:class:`sessions.SQLiteSession`,
    :class:`sessions.PostgresSession`) and stores hand them out with
    ``store.session(session_id)``.

    ``commit_timeout`` (seconds) bounds how long ``commit()``, an autocommit write or
    ``close()`` may hold its caller, cancelled or not; ``None`` takes the store's.
    It and ``integrity`` may also come as ``options=StoreOptions(...)`` (a session
    takes no other setting of it; one given both ways is a ``TypeError``).

    ``session_settings`` (an agents ``SessionSettings`` or a dict of its fields) gives
    ``get_items()`` its default ``limit``; it defaults to ``SessionSettings()``.

    ``integrity`` (``"reject"``, ``"quarantine"``, ``"off"``; ``None`` takes the
    store's): what ``commit()`` does with history the Responses API would refuse (an
    output without its call, a call without its output in a finished turn, ...; see
    ``docs/history.md``).

    A session made with ``store_factory`` (the one-liners ``SQLiteSession(id, path)``
    and ``PostgresSession(id, dsn)``) opens a store of its own per event loop, on first
    use there, so it can be shared by threads that each run an event loop (see
    ``docs/threads.md``); ``single_loop`` names what forbids that (a private in-memory
    database), and the session then refuses every loop but its first. A session on a
    borrowed ``store=`` belongs to that store's event loop.
    """
