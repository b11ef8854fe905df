"""The session catalogue: validation of what ``set_info()`` stages, once for every backend.

A session's catalogue entry is its ``user_id``, ``title``, ``tags``, a free JSON
``metadata`` object and its own idle ``ttl``; it is written by a commit, in the same
transaction as the items staged with it (:attr:`sessions.Batch.info`). Backends store
what arrives here already checked: they never see a value these functions refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from ._backend import Batch, InfoChange, SessionFilter
from .errors import DeletedConflictError, VersionConflictError

__all__ = [
    "INFO_FIELDS",
    "KEEP",
    "check_life",
    "deleted_message",
    "MAX_METADATA_BYTES",
    "MAX_TAGS",
    "MAX_TAG_CHARS",
    "MAX_TITLE_CHARS",
    "MAX_USER_ID_CHARS",
    "decode_metadata",
    "info_change",
    "merge_info",
    "session_filter",
    "validate_tag",
    "validate_ttl",
    "validate_user_id",
    "version_conflict",
]

MAX_USER_ID_CHARS = 255
MAX_TITLE_CHARS = 500
MAX_TAG_CHARS = 64
MAX_TAGS = 32
MAX_METADATA_BYTES = 64 * 1024

INFO_FIELDS = ("user_id", "title", "tags", "metadata", "ttl")


class _Keep:
    """The default of ``set_info()`` arguments: leave that field as it is."""

    _instance: _Keep | None = None

    def __new__(cls) -> _Keep:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Any = _Keep()


def _text(value: object, name: str, limit: int) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str or None, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{name} must not be empty (pass None to clear it)")
    if len(value) > limit:
        raise ValueError(f"{name} is {len(value)} characters long; at most {limit} are allowed")
    if "\x00" in value:
        raise ValueError(f"{name} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{name} is not valid Unicode text (lone surrogate): {exc}") from None
    return value


def validate_user_id(value: object, name: str = "user_id") -> str:
    return _text(value, name, MAX_USER_ID_CHARS)


def validate_tag(value: object, name: str = "tag") -> str:
    return _text(value, name, MAX_TAG_CHARS)


def _tags(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(
            f"tags must be a collection of str (a set, list or tuple) or None, "
            f"got {type(value).__name__}"
        )
    tags = sorted({validate_tag(tag, "each tag") for tag in value})
    if len(tags) > MAX_TAGS:
        raise ValueError(f"{len(tags)} distinct tags given; at most {MAX_TAGS} are allowed")
    return tuple(tags)


def _metadata(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(
            f"metadata must be a dict (a JSON object) or None, got {type(value).__name__}"
        )
    try:
        text = json.dumps(dict(value), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        text.encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise ValueError(f"metadata is not JSON: {exc}") from None
    if "\\u0000" in text:
        raise ValueError("metadata must not contain NUL characters")
    size = len(text.encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise ValueError(
            f"metadata is {size} bytes as JSON; at most {MAX_METADATA_BYTES} are allowed"
        )
    return text


def validate_ttl(value: object, name: str = "ttl") -> float | None:
    """A time-to-live (a positive ``timedelta``, or ``None``) in seconds."""
    if value is None:
        return None
    if not isinstance(value, timedelta):
        raise TypeError(f"{name} must be a timedelta or None, got {type(value).__name__}")
    seconds = value.total_seconds()
    if not seconds > 0 or not math.isfinite(seconds):
        raise ValueError(f"{name} must be a positive timedelta, got {value!r}")
    return seconds


def info_change(**values: Any) -> InfoChange:
    """The validated change for ``set_info(**values)`` (``KEEP``: leave a field as is)."""
    given = {name: value for name, value in values.items() if value is not KEEP}
    unknown = sorted(set(given) - set(INFO_FIELDS))
    if unknown:
        raise TypeError(f"set_info() got unknown field(s) {unknown}; known: {list(INFO_FIELDS)}")
    if not given:
        raise TypeError(f"set_info() needs at least one of {', '.join(INFO_FIELDS)}")
    user = given.get("user_id")
    title = given.get("title")
    return InfoChange(
        fields=frozenset(given),
        user_id=None if user is None else validate_user_id(user),
        title=None if title is None else _text(title, "title", MAX_TITLE_CHARS),
        tags=_tags(given.get("tags")),
        metadata=_metadata(given.get("metadata")),
        ttl=validate_ttl(given.get("ttl")),
    )


def merge_info(earlier: InfoChange | None, later: InfoChange) -> InfoChange:
    """``later`` applied over ``earlier``: one change doing what both do, in order."""
    if earlier is None:
        return later
    merged = {name: getattr(earlier, name) for name in earlier.fields}
    merged.update({name: getattr(later, name) for name in later.fields})
    tags = merged.pop("tags", ())
    return InfoChange(fields=earlier.fields | later.fields, tags=tags, **merged)


def decode_metadata(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    value = json.loads(text)
    return value if isinstance(value, dict) else None


def session_filter(
    user_id: str | None, tag: str | None, updated_after: datetime | None
) -> SessionFilter:
    """A validated :class:`SessionFilter` (a naive ``updated_after`` is taken as UTC)."""
    if user_id is not None:
        validate_user_id(user_id)
    if tag is not None:
        validate_tag(tag)
    if updated_after is not None:
        if not isinstance(updated_after, datetime):
            raise TypeError(
                f"updated_after must be a datetime or None, got {type(updated_after).__name__}"
            )
        if updated_after.tzinfo is None:
            updated_after = updated_after.replace(tzinfo=timezone.utc)
    return SessionFilter(user_id=user_id, tag=tag, updated_after=updated_after)


def version_conflict(session_id: str, expected: int, actual: int) -> VersionConflictError:
    """What a backend raises when ``Batch.expect_version`` does not hold."""
    return VersionConflictError(
        f"session {session_id!r} is at version {actual}, not {expected} as expected: "
        "another writer committed since that version was read",
        expected=expected,
        actual=actual,
    )


def check_life(session_id: str, batch: Batch, life: str | None) -> None:
    """Raise :class:`~sessions.errors.DeletedConflictError` unless ``batch`` may be
    applied to the session's present life ``life`` (``None``: the session does not
    exist): see :attr:`Batch.incarnation`. Backends call it for every batch they are
    about to apply, with the life they read in that transaction."""
    if batch.incarnation is not None and batch.incarnation != life:
        raise DeletedConflictError(deleted_message(session_id))


def deleted_message(session_id: str) -> str:
    """The text of a :class:`~sessions.errors.DeletedConflictError`, written once."""
    return (
        f"session {session_id!r} was deleted after this session object read it "
        "(delete_session, delete_user or purge); its changes were made against the "
        "deleted history and are not applied: rollback() and read again"
    )
