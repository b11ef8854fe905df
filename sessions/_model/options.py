"""``StoreOptions``: a store's settings as one value, validated once, in its constructor.

``retry``, ``commit_timeout``, ``ttl`` and ``integrity`` are taken by stores (their
``__init__``, ``open`` and ``from_pool``), ``open_store(url)``, sessions and the
wrapper, either as keywords (as before) or as ``options=StoreOptions(...)``. Every
entry point turns what it was given into one ``StoreOptions`` with :func:`merge_options`,
so each setting is checked here and nowhere else. :class:`StoreKeywords` and
:class:`SessionKeywords` name those keywords once for every signature that takes them
(``**keywords: Unpack[StoreKeywords]``); :func:`store_options` and
:func:`session_keywords` read them, refusing an unknown keyword as Python would.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypedDict

from .catalogue import validate_ttl
from .policy import Integrity, RetryPolicy, validate_integrity
from .validate import validate_seconds

__all__ = [
    "SESSION_KEYWORDS",
    "SETTINGS",
    "STORE_KEYWORDS",
    "SessionKeywords",
    "StoreKeywords",
    "StoreOptions",
    "check_keywords",
    "merge_options",
    "session_keywords",
    "session_options",
    "store_options",
]

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


class StoreKeywords(TypedDict, total=False):
    """The settings keywords of every store entry point (``__init__``, ``open``,
    ``from_pool``): a :class:`StoreOptions`' four, or ``options=`` holding
    them. Left out or ``None``: the setting's default."""

    retry: RetryPolicy | None
    commit_timeout: float | None
    ttl: timedelta | None
    integrity: Integrity | None
    options: StoreOptions | None


class SessionKeywords(TypedDict, total=False):
    """The keywords every session class takes (and ``Store.session()``): ``autocommit``
    (default ``False``), ``session_settings`` (default ``None``: ``SessionSettings()``),
    and the session's own settings, ``commit_timeout`` and ``integrity`` (``None``: the
    store's), or ``options=`` holding them."""

    autocommit: bool
    session_settings: Any
    commit_timeout: float | None
    integrity: Integrity | None
    options: StoreOptions | None


#: The names of :class:`StoreKeywords` and of :class:`SessionKeywords`.
STORE_KEYWORDS = frozenset(StoreKeywords.__annotations__)
SESSION_KEYWORDS = frozenset(SessionKeywords.__annotations__)


def check_keywords(keywords: Mapping[str, object], allowed: frozenset[str], function: str) -> None:
    """Refuse a keyword not in ``allowed`` with the ``TypeError`` Python raises for a
    function (``function``, its qualified name) without that parameter."""
    for name in keywords:
        if name not in allowed:
            raise TypeError(f"{function}() got an unexpected keyword argument {name!r}")


def store_options(keywords: StoreKeywords, where: str) -> StoreOptions:
    """The :class:`StoreKeywords` a store entry point was given as one
    :class:`StoreOptions` (see :func:`merge_options`); ``where`` names the entry point in
    its errors, and in the ``TypeError`` for an unknown keyword, raised first, as Python
    would."""
    check_keywords(keywords, STORE_KEYWORDS, where)
    settings = {name: keywords.get(name) for name in SETTINGS}
    return merge_options(keywords.get("options"), where, **settings)


def session_options(keywords: SessionKeywords, where: str) -> StoreOptions:
    """:func:`merge_options` for a session's keywords (``options``, ``commit_timeout``,
    ``integrity``; ``where`` names the entry point in its errors): a session has only
    ``commit_timeout`` and ``integrity`` of its own, any other setting in ``options=`` is
    a ``TypeError`` naming it."""
    merged = merge_options(
        keywords.get("options"),
        where,
        commit_timeout=keywords.get("commit_timeout"),
        integrity=keywords.get("integrity"),
    )
    foreign = [name for name in merged.given() if name not in _SESSION_SETTINGS]
    if foreign:
        raise TypeError(
            f"{where}: {' and '.join(foreign)} in options= belong to a store, not a session "
            "(a session takes commit_timeout and integrity)"
        )
    return merged


def session_keywords(keywords: SessionKeywords, where: str) -> tuple[StoreOptions, SessionKeywords]:
    """What a session class named ``where`` was given as :class:`SessionKeywords`: an
    unknown keyword refused as Python would (naming ``where.__init__``), the settings
    merged by :func:`session_options`; returns them and the keywords to hand on to
    the session core (the merged settings as ``options=``)."""
    check_keywords(keywords, SESSION_KEYWORDS, f"{where}.__init__")
    settings = session_options(keywords, where)
    forward: SessionKeywords = {"options": settings}
    if "autocommit" in keywords:
        forward["autocommit"] = keywords["autocommit"]
    if "session_settings" in keywords:
        forward["session_settings"] = keywords["session_settings"]
    return settings, forward
