"""The session catalogue: validation of what ``set_info()`` stages, once for every backend.

A session's catalogue entry is its ``user_id``, ``title``, ``tags``, a free JSON
``metadata`` object and its own idle ``ttl``; it is written by a commit, in the same
transaction as the items staged with it (:attr:`sessions.Batch.info`). Backends store
what arrives here already checked: they never see a value these functions refused.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from ..errors import DeletedConflictError, VersionConflictError
from .backend import Batch, InfoChange, SessionFilter
from .validate import MAX_DURATION, check_text

logger = logging.getLogger("sessions")

__all__ = [
    "INFO_FIELDS",
    "KEEP",
    "check_life",
    "deleted_message",
    "MAX_METADATA_BYTES",
    "MAX_METADATA_DEPTH",
    "MAX_TAGS",
    "MAX_TAG_CHARS",
    "MAX_TITLE_CHARS",
    "MAX_TTL",
    "MAX_USER_ID_CHARS",
    "decode_metadata",
    "decode_tags",
    "expired",
    "info_change",
    "merge_info",
    "session_filter",
    "stored_ttl",
    "ttl_in_force",
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
#: How deeply metadata may nest: the object itself is level 1, an object or array in
#: it level 2, and so on.
MAX_METADATA_DEPTH = 32
#: The longest time-to-live (:data:`sessions._model.validate.MAX_DURATION`, 100 years).
MAX_TTL = MAX_DURATION
_MAX_TTL_SECONDS = MAX_TTL.total_seconds()

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
    return check_text(value, name)


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


def _where(trail: list[object]) -> str:
    """Where in the metadata ``trail`` (keys and indexes) leads, at most 200 characters."""
    text = "metadata" + "".join(f"[{step!r}]" for step in trail)
    return text if len(text) <= 200 else text[:199] + "…"


def _check_metadata(value: object, trail: list[object], open_ids: set[int]) -> None:
    """Refuse what JSON would change or cannot hold, before encoding: keys that are not
    ``str`` (``json`` writes ``{1: x}`` as ``{"1": x}``), nesting past
    :data:`MAX_METADATA_DEPTH` (``json`` would recurse until ``RecursionError``),
    reference cycles, and text with NUL or lone surrogates. Other values are left to
    the encoder (which refuses sets, bytes, NaN and arbitrary objects)."""
    if isinstance(value, str):
        check_text(value, _where(trail))
        return
    if not isinstance(value, (dict, list, tuple)):
        return
    if len(trail) >= MAX_METADATA_DEPTH:
        raise ValueError(
            f"metadata is nested more than {MAX_METADATA_DEPTH} levels deep "
            f"(at {_where(trail[:MAX_METADATA_DEPTH])})"
        )
    if id(value) in open_ids:
        raise ValueError(f"metadata contains a reference cycle (at {_where(trail)})")
    open_ids.add(id(value))
    if isinstance(value, dict):
        for key, child in value.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"metadata keys must be str: {_where(trail)} has the "
                    f"{type(key).__name__} key {key!r}"
                )
            check_text(key, f"a key of {_where(trail)}")
            trail.append(key)
            _check_metadata(child, trail, open_ids)
            trail.pop()
    else:
        for index, child in enumerate(value):
            trail.append(index)
            _check_metadata(child, trail, open_ids)
            trail.pop()
    open_ids.discard(id(value))


def _metadata(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(
            f"metadata must be a dict (a JSON object) or None, got {type(value).__name__}"
        )
    value = dict(value)
    _check_metadata(value, [], set())
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"metadata is not JSON: {exc}") from None
    size = len(text.encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise ValueError(
            f"metadata is {size} bytes as JSON; at most {MAX_METADATA_BYTES} are allowed"
        )
    return text


def validate_ttl(value: object, name: str = "ttl") -> float | None:
    """A time-to-live (a positive ``timedelta`` of at most :data:`MAX_TTL`, or ``None``)
    in seconds."""
    if value is None:
        return None
    if not isinstance(value, timedelta):
        raise TypeError(f"{name} must be a timedelta or None, got {type(value).__name__}")
    return validate_ttl_seconds(value.total_seconds(), name)


def _number(value: float) -> str:
    """``value`` for a message: a huge ``int`` by its order of magnitude."""
    if isinstance(value, float):
        return f"{value:.6g}"
    text = str(value)
    return text if len(text) <= 20 else f"about 10**{len(text) - 1}"


def validate_ttl_seconds(seconds: float, name: str = "ttl") -> float:
    """A time-to-live in seconds (an ``int`` of any size or a ``float``): > 0 and at
    most :data:`MAX_TTL` (100 years); returned as a ``float``."""
    if not seconds > 0:  # NaN too
        raise ValueError(f"{name} must be a positive time-to-live, got {seconds!r} seconds")
    if seconds > _MAX_TTL_SECONDS:  # int against float compares exactly, never overflows
        raise ValueError(
            f"{name} must be at most {MAX_TTL.days} days (100 years, "
            f"{_MAX_TTL_SECONDS:.0f} seconds), got {_number(seconds)} seconds"
        )
    return float(seconds)


def ttl_in_force(seconds: float | None) -> float | None:
    """A stored TTL (seconds) as it is applied: clamped to 0 .. :data:`MAX_TTL`.

    New values are validated; this keeps one stored by an older version or by hand (too
    large, infinite, NaN, negative) from breaking reads and purges of the whole store.
    Backends apply the same clamp in SQL.
    """
    if seconds is None:
        return None
    if not seconds <= _MAX_TTL_SECONDS:  # too large, infinite or NaN
        return _MAX_TTL_SECONDS
    return max(seconds, 0.0)


def stored_ttl(seconds: float | None) -> timedelta | None:
    """The :attr:`SessionInfo.ttl` of a stored TTL in seconds (see :func:`ttl_in_force`)."""
    value = ttl_in_force(seconds)
    return None if value is None else timedelta(seconds=value)


def expired(
    updated_at: datetime, ttl: float | None, default_ttl: float | None, now: datetime
) -> bool:
    """Whether a session last updated at ``updated_at`` with the stored ``ttl`` (else
    ``default_ttl``; seconds) has expired at ``now``. Never overflows: it compares the
    session's age with its TTL instead of computing when it expires."""
    seconds = ttl_in_force(ttl if ttl is not None else default_ttl)
    return seconds is not None and now - updated_at > timedelta(seconds=seconds)


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
    """Stored metadata text as a dict; ``None`` (with a logged warning) if it is not a
    JSON object: one corrupt entry never breaks a listing of the whole store."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (ValueError, TypeError, RecursionError) as exc:
        logger.warning("skipping stored session metadata that is not JSON: %s", exc)
        return None
    return value if isinstance(value, dict) else None


def decode_tags(text: str | None) -> tuple[str, ...]:
    """Stored tags (a JSON array of str, SQLite) as a tuple; ``()`` (with a logged
    warning) if the text is not one."""
    if not text:
        return ()
    try:
        value = json.loads(text)
    except (ValueError, TypeError, RecursionError) as exc:
        logger.warning("skipping stored session tags that are not JSON: %s", exc)
        return ()
    if not isinstance(value, list) or not all(isinstance(tag, str) for tag in value):
        logger.warning("skipping stored session tags that are not a list of text")
        return ()
    return tuple(value)


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
