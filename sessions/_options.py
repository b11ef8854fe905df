"""``StoreOptions``: a store's settings as one value, validated once, in its constructor.

``retry``, ``commit_timeout``, ``ttl`` and ``integrity`` are taken by stores (their
``__init__``, ``open`` and ``from_pool``), ``open_store(url)``, sessions and the
wrapper, either as keywords (as before) or as ``options=StoreOptions(...)``. Every
entry point turns what it was given into one ``StoreOptions`` with :func:`merge_options`,
so each setting is checked here and nowhere else.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ._catalogue import validate_ttl
from ._policy import Integrity, RetryPolicy, validate_integrity
from ._validate import validate_seconds

__all__ = ["SETTINGS", "StoreOptions", "merge_options", "session_options"]

#: The settings a :class:`StoreOptions` holds, in the order errors name them.
SETTINGS = ("retry", "commit_timeout", "ttl", "integrity")

#: The settings a session has of its own (the others belong to its store).
_SESSION_SETTINGS = ("commit_timeout", "integrity")


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """A store's settings, validated when made (``TypeError`` / ``ValueError`` naming the
    setting and the wrong value). ``None`` leaves a setting unset: the default, or for a
    session its store's.

    * ``retry``: a :class:`~sessions.RetryPolicy` (default ``RetryPolicy()``).
    * ``commit_timeout``: seconds a commit, an autocommit write or ``close()`` may hold
      its caller (default 30).
    * ``ttl``: a ``timedelta``, the store's default idle time-to-live (default none).
    * ``integrity``: ``"quarantine"`` (the stores' default), ``"reject"`` or ``"off"``.

    Pass it as ``options=`` to a store's ``open`` (or ``from_pool``, or constructor),
    ``open_store(url)``, ``store.session()``, a session or ``TransactionalSession``; a
    session takes ``commit_timeout`` and ``integrity`` only. A setting given both as a
    keyword and in ``options=`` is a ``TypeError`` naming it.
    """

    retry: RetryPolicy | None = None
    commit_timeout: float | None = None
    ttl: timedelta | None = None
    integrity: Integrity | None = None

    def __post_init__(self) -> None:
        if self.retry is not None and not isinstance(self.retry, RetryPolicy):
            raise TypeError(f"retry must be a RetryPolicy, got {type(self.retry).__name__}")
        if self.commit_timeout is not None:
            seconds = validate_seconds(self.commit_timeout, "commit_timeout")
            object.__setattr__(self, "commit_timeout", seconds)
        validate_ttl(self.ttl)
        if self.integrity is not None:
            validate_integrity(self.integrity)

    def given(self) -> tuple[str, ...]:
        """The names of the settings this value sets (not ``None``), in :data:`SETTINGS`
        order."""
        return tuple(name for name in SETTINGS if getattr(self, name) is not None)


_UNSET = StoreOptions()


def merge_options(options: object, where: str, **keywords: Any) -> StoreOptions:
    """``options`` (a :class:`StoreOptions` or ``None``) with the keyword settings that
    are not ``None`` added; a setting given both ways is a ``TypeError`` naming it and
    ``where`` (the entry point). The result is validated (by its constructor)."""
    if options is not None and not isinstance(options, StoreOptions):
        raise TypeError(f"options must be a StoreOptions, got {type(options).__name__}")
    given = {name: value for name, value in keywords.items() if value is not None}
    if options is None:
        return StoreOptions(**given) if given else _UNSET
    if not given:
        return options
    both = [name for name in SETTINGS if name in given and getattr(options, name) is not None]
    if both:
        raise TypeError(
            f"{where}: {' and '.join(both)} given both as a keyword and in options=; "
            "give each setting once"
        )
    return dataclasses.replace(options, **given)


def session_options(options: object, where: str, **keywords: Any) -> StoreOptions:
    """:func:`merge_options` for a session, which has only ``commit_timeout`` and
    ``integrity`` of its own: any other setting is a ``TypeError`` naming it."""
    merged = merge_options(options, where, **keywords)
    foreign = [name for name in merged.given() if name not in _SESSION_SETTINGS]
    if foreign:
        raise TypeError(
            f"{where}: {' and '.join(foreign)} in options= belong to a store, not a session "
            "(a session takes commit_timeout and integrity)"
        )
    return merged
