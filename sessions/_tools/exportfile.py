"""The export file: its format, written and read (every line of an import file checked).

The file format (version 1), one JSON object per line::

    {"type": "header", "format": "txsessions-export", "version": 1, "exported_at": "..."}
    {"type": "session", "session": "abc", "created_at": "...", "updated_at": "..."}
      (and, when set, the catalogue: "user_id", "title", "tags", "metadata", "ttl_seconds")
    {"type": "item", "session": "abc", "item": {...}}          (one line per item, in order)
    {"type": "end", "session": "abc", "items": 2}

Writing: one function per line type (:func:`header_line`, :func:`session_line`,
:func:`item_prefix`, :func:`end_line`). Reading: :func:`scan_import` yields the records
of a file, raising :class:`ImportFileError` (naming the line) at the first line that is
not valid: bad JSON, an unknown line type, a bad session id, item, time or catalogue
entry, a session opened inside another, or an ``end`` line whose count disagrees with
the file. Streaming sessions out (export) and applying the records (import) are
:mod:`sessions._tools.transfer`'s.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .._model.backend import InfoChange, SessionInfo
from .._model.catalogue import info_change, validate_ttl_seconds
from .._model.serde import encode_item
from .._model.validate import iso_utc, validate_session_id
from ..errors import InvalidItemError, InvalidSessionIdError, SessionError

__all__ = [
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "ITEM_SUFFIX",
    "ImportFileError",
    "Record",
    "dumps",
    "end_line",
    "header_line",
    "item_prefix",
    "scan_import",
    "session_line",
]

EXPORT_FORMAT = "txsessions-export"
EXPORT_VERSION = 1


class ImportFileError(SessionError, ValueError):
    """An import file that is not a valid export. ``line`` is 1-based."""

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(f"{path}, line {line}: {message}")
        self.path = path
        self.line = line


def dumps(value: Any) -> str:
    """``value`` as one line of the file: compact JSON, non-ASCII text kept as is."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# --------------------------------------------------------------------------- writing

#: What ends an item line after the item (see :func:`item_prefix`).
ITEM_SUFFIX = "}\n"


def header_line(now: datetime) -> str:
    """The first line of an export made at ``now``."""
    header = {
        "type": "header",
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "exported_at": iso_utc(now),
    }
    return dumps(header) + "\n"


def session_line(info: SessionInfo) -> str:
    """The line that opens a session: its times and, when set, its catalogue entry."""
    line = {
        "type": "session",
        "session": info.session_id,
        "created_at": iso_utc(info.created_at),
        "updated_at": iso_utc(info.updated_at),
        **_catalogue_fields(info),
    }
    return dumps(line) + "\n"


def _catalogue_fields(info: SessionInfo) -> dict[str, Any]:
    """The session's catalogue entry for its export line (only the fields set)."""
    fields: dict[str, Any] = {
        "user_id": info.user_id,
        "title": info.title,
        "tags": list(info.tags) or None,
        "metadata": info.metadata,
        "ttl_seconds": None if info.ttl is None else info.ttl.total_seconds(),
    }
    return {name: value for name, value in fields.items() if value is not None}


def item_prefix(session_id: str) -> str:
    """An item line of ``session_id`` up to its item: the line is this, the item's
    canonical JSON text as stored, then :data:`ITEM_SUFFIX`."""
    return '{"type":"item","session":' + dumps(session_id) + ',"item":'


def end_line(session_id: str, items: int) -> str:
    """The line that closes a session of ``items`` items."""
    return dumps({"type": "end", "session": session_id, "items": items}) + "\n"


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True, slots=True)
class Record:
    line: int
    kind: str  # "session", "item", "end"
    session_id: str
    text: str = ""  # the item, canonical JSON (kind == "item")
    times: tuple[datetime, datetime] | None = None  # (created, updated) (kind == "session")
    info: InfoChange | None = None  # the catalogue entry (kind == "session")


def _read_lines(path: str) -> Iterator[tuple[int, str]]:
    """``(line_number, text)`` of every non-blank line, decoded as UTF-8."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below, even on error
    except FileNotFoundError:
        raise FileNotFoundError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise IsADirectoryError(f"{path} is a directory, not an export file") from None
    with handle:
        for number, raw in enumerate(handle, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ImportFileError(path, number, f"not UTF-8 text ({exc.reason})") from None
            if text.strip():
                yield number, text


class _Scanner:
    """Checks the lines of one export file in order; see :func:`scan_import`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.current: tuple[str, int, int] | None = None  # (session id, opened at, items)
        self.first = True

    def bad(self, number: int, message: str) -> ImportFileError:
        return ImportFileError(self.path, number, message)

    def parse(self, number: int, text: str) -> dict[str, Any] | None:
        """The line as a JSON object; ``None`` for the header line."""
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise self.bad(number, f"not valid JSON ({exc})") from None
        if not isinstance(value, dict):
            raise self.bad(number, f"expected a JSON object, got {type(value).__name__}")
        first, self.first = self.first, False
        if value.get("type") != "header":
            return value
        if not first:
            raise self.bad(number, "a header line may only be the first line")
        if value.get("format") != EXPORT_FORMAT:
            raise self.bad(number, f"not a txsessions export (format {value.get('format')!r})")
        version = value.get("version")
        if not isinstance(version, int) or version > EXPORT_VERSION:
            raise self.bad(
                number,
                f"export format version {version!r} is newer than this txsessions reads "
                f"({EXPORT_VERSION}); upgrade txsessions",
            )
        return None

    def record(self, number: int, value: dict[str, Any]) -> Record:
        kind = value.get("type")
        if kind not in ("session", "item", "end"):
            raise self.bad(number, f"unknown line type {kind!r} (expected session, item or end)")
        session_id = value.get("session")
        try:
            validate_session_id(session_id)
        except InvalidSessionIdError as exc:
            raise self.bad(number, f"bad session id: {exc}") from None
        assert isinstance(session_id, str)
        if kind == "session":
            record = self.open_session(number, session_id, self.times(number, value))
            return Record(
                number, "session", session_id, times=record.times, info=self.info(number, value)
            )
        if kind == "item":
            return self.item(number, session_id, value.get("item"))
        return self.end(number, session_id, value.get("items"))

    def info(self, number: int, value: dict[str, Any]) -> InfoChange | None:
        """The session line's catalogue entry (``None``: it has none)."""
        fields = {
            name: value[key]
            for name, key in (
                ("user_id", "user_id"),
                ("title", "title"),
                ("tags", "tags"),
                ("metadata", "metadata"),
                ("ttl", "ttl_seconds"),
            )
            if value.get(key) is not None
        }
        if not fields:
            return None
        try:
            ttl = fields.get("ttl")
            if ttl is not None:
                if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
                    raise TypeError(f"ttl_seconds must be a number, got {type(ttl).__name__}")
                fields["ttl"] = timedelta(seconds=validate_ttl_seconds(ttl, "ttl_seconds"))
            return info_change(**fields)
        except (TypeError, ValueError, OverflowError) as exc:
            raise self.bad(number, f"bad catalogue entry: {exc}") from None

    def times(self, number: int, value: dict[str, Any]) -> tuple[datetime, datetime] | None:
        """The session line's ``(created_at, updated_at)``; ``None`` if it has neither."""
        raw = (value.get("created_at"), value.get("updated_at"))
        if raw == (None, None):
            return None
        parsed: list[datetime] = []
        for name, text in zip(("created_at", "updated_at"), raw, strict=True):
            moment = _parse_time(text)
            if moment is None:
                raise self.bad(
                    number, f"{name} must be an ISO 8601 time with a UTC offset, got {text!r}"
                )
            parsed.append(moment)
        if parsed[0] > parsed[1]:
            raise self.bad(number, f"created_at {raw[0]!r} is after updated_at {raw[1]!r}")
        return parsed[0], parsed[1]

    def open_session(
        self, number: int, session_id: str, times: tuple[datetime, datetime] | None
    ) -> Record:
        if self.current is not None:
            raise self.bad(
                number,
                f"session {session_id!r} starts before session {self.current[0]!r} "
                f"(line {self.current[1]}) ended: its end line is missing",
            )
        self.current = (session_id, number, 0)
        return Record(number, "session", session_id, times=times)

    def item(self, number: int, session_id: str, item: Any) -> Record:
        current = self.current
        if current is not None and current[0] != session_id:
            raise self.bad(
                number,
                f"item of session {session_id!r} inside session {current[0]!r} "
                f"(opened at line {current[1]})",
            )
        try:
            encoded = encode_item(item)
        except InvalidItemError as exc:
            raise self.bad(number, f"bad item: {exc}") from None
        if current is not None:
            self.current = (current[0], current[1], current[2] + 1)
        return Record(number, "item", session_id, encoded)

    def end(self, number: int, session_id: str, declared: Any) -> Record:
        current = self.current
        if current is None or current[0] != session_id:
            raise self.bad(number, f"end of session {session_id!r}, which is not open here")
        if isinstance(declared, bool) or not isinstance(declared, int):
            raise self.bad(number, f"end line needs an integer 'items', got {declared!r}")
        if declared != current[2]:
            raise self.bad(
                number,
                f"session {session_id!r} declares {declared} items but the file has "
                f"{current[2]} (from line {current[1]}): the file was cut or edited",
            )
        self.current = None
        return Record(number, "end", session_id)


def _parse_time(text: Any) -> datetime | None:
    """An ISO 8601 time with an offset (``Z`` too) as an aware datetime, else ``None``."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def scan_import(path: str) -> Iterator[Record]:
    """Parse and check an export file, yielding its session/item/end records.

    Raises :class:`ImportFileError` at the first bad line, naming it.
    """
    scanner = _Scanner(path)
    last_line = 0
    for number, text in _read_lines(path):
        last_line = number
        value = scanner.parse(number, text)
        if value is not None:
            yield scanner.record(number, value)
    if scanner.current is not None:
        session_id, opened, _ = scanner.current
        raise ImportFileError(
            path,
            last_line,
            f"the file ends inside session {session_id!r} (opened at line {opened}): "
            "it is truncated",
        )
