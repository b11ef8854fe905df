"""Argument checks shared by every public entry point: one helper per job.

Each check returns the value it accepted (normalised where that is obvious, say an
``int`` timeout as ``float``) or raises ``TypeError`` / ``ValueError`` naming the
parameter and what was wrong with it.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from ..errors import InvalidSessionIdError

__all__ = [
    "MAX_DURATION",
    "MAX_INT64",
    "MAX_SESSION_ID_LENGTH",
    "check_text",
    "iso_utc",
    "validate_bool",
    "validate_duration",
    "validate_identifier",
    "validate_limit",
    "validate_positive_int",
    "validate_seconds",
    "validate_session_id",
]

MAX_SESSION_ID_LENGTH = 1024

#: The largest count, limit or position accepted: what a signed 64-bit column (SQLite
#: ``INTEGER``, PostgreSQL ``bigint``) and the drivers' parameters hold.
MAX_INT64 = 2**63 - 1

#: The longest duration accepted anywhere (a time-to-live, ``purge(older_than=)``,
#: ``prune_batch_records(older_than=)``, the CLI's ``--older-than`` and ``--since``):
#: 100 years of 365.25 days. Every time computed from one (a time plus or minus it)
#: then stays within Python's ``datetime`` and both databases' timestamps.
MAX_DURATION = timedelta(days=36525)

# 41 characters at most: PostgreSQL truncates identifiers at 63 bytes, and table names
# are built from a prefix plus a suffix of up to 22 characters.
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,40}")


def check_text(value: str, name: str) -> str:
    """``value`` if every database can store it as text: no NUL character (PostgreSQL's
    ``text`` cannot hold one) and no lone surrogate (not Unicode: UTF-8 cannot encode
    it); else ``ValueError`` naming ``name``."""
    if "\x00" in value:
        raise ValueError(f"{name} must not contain NUL characters")
    if not value.isascii():  # O(1) in CPython: no surrogate to look for
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            bad = value[exc.start : exc.end]
            raise ValueError(
                f"{name} is not valid Unicode text: lone surrogate {bad!r} at position {exc.start}"
            ) from None
    return value


def validate_session_id(session_id: object, name: str = "session_id") -> str:
    """A usable session key: a non-empty ``str`` of valid Unicode, no NUL, <= 1024 chars."""
    if not isinstance(session_id, str):
        raise InvalidSessionIdError(
            f"{name} must be a str, got {type(session_id).__name__}: {session_id!r}"
        )
    if not session_id:
        raise InvalidSessionIdError(f"{name} must not be empty")
    if len(session_id) > MAX_SESSION_ID_LENGTH:
        raise InvalidSessionIdError(
            f"{name} is {len(session_id)} characters long; the maximum is {MAX_SESSION_ID_LENGTH}"
        )
    try:
        check_text(session_id, name)
    except ValueError as exc:
        raise InvalidSessionIdError(str(exc)) from None
    return session_id


def _int_in_range(value: int, name: str, minimum: int) -> int:
    """``value`` if it is from ``minimum`` to :data:`MAX_INT64`, else ``ValueError``."""
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if value > MAX_INT64:
        raise ValueError(f"{name} must be at most {MAX_INT64} (2**63 - 1), got {value}")
    return value


def validate_limit(limit: object, name: str = "limit") -> int | None:
    """``None`` or an ``int`` from 0 to :data:`MAX_INT64` (``bool`` is refused)."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"{name} must be an int or None, got {type(limit).__name__}")
    return _int_in_range(limit, name, 0)


def validate_positive_int(value: object, name: str) -> int:
    """An ``int`` from 1 to :data:`MAX_INT64` (``bool`` is refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}: {value!r}")
    return _int_in_range(value, name, 1)


def validate_duration(value: object, name: str) -> timedelta:
    """A ``timedelta`` from 0 to :data:`MAX_DURATION` (100 years)."""
    if not isinstance(value, timedelta):
        raise TypeError(f"{name} must be a timedelta, got {type(value).__name__}: {value!r}")
    if value < timedelta(0):
        raise ValueError(f"{name} must be a non-negative timedelta, got {value!r}")
    if value > MAX_DURATION:
        raise ValueError(
            f"{name} must be at most {MAX_DURATION.days} days (100 years), got {value.days} days"
        )
    return value


def validate_seconds(value: object, name: str, *, allow_zero: bool = False) -> float:
    """A finite number of seconds, > 0 (or >= 0 with ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    seconds = float(value)
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return seconds


def validate_bool(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}: {value!r}")
    return value


def validate_identifier(value: object, name: str, *, allow_empty: bool = False) -> str:
    """A plain SQL identifier: a letter or ``_``, then letters, digits, ``_`` (<= 41 chars)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}: {value!r}")
    if value == "" and allow_empty:
        return value
    if not _IDENTIFIER.fullmatch(value):
        raise ValueError(
            f"{name} {value!r} is not a plain SQL identifier: it must match "
            f"{_IDENTIFIER.pattern} (letters, digits, underscores; not starting with a digit)"
        )
    return value


def iso_utc(moment: datetime) -> str:
    """``moment`` as ISO 8601 in UTC (a naive datetime is taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).isoformat()
