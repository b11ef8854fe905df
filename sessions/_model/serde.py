"""Item <-> JSON text, shared by every backend.

Items are snapshotted as JSON text the moment they are staged, so later mutation of
the caller's dicts changes nothing, and so that no live object (an Agent, a pydantic
model, a run result) can ever be held by a session.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from ..errors import InvalidItemError
from .history import SHAPE_FIELDS, Shape, shape_of

logger = logging.getLogger("sessions")

_encode = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), check_circular=True
).encode
_decode = json.JSONDecoder().decode
_dumps = orjson.dumps


_MAX_DEPTH = 500


def _check_keys(value: Any, depth: int) -> None:
    """Refuse what JSON would silently change: non-string keys and runaway nesting.

    ``json`` turns ``{1: x}`` into ``{"1": x}``; such an item would not round-trip, so
    it is refused up front. Values are left to the encoder (which refuses sets, bytes,
    NaN, Infinity and arbitrary objects).
    """
    if depth > _MAX_DEPTH:
        raise ValueError(f"nested deeper than {_MAX_DEPTH} levels")
    if isinstance(value, dict):
        for key, child in value.items():
            if not isinstance(key, str):
                raise TypeError(f"dict key {key!r} is a {type(key).__name__}, not a str")
            if isinstance(child, (dict, list, tuple)):
                _check_keys(child, depth + 1)
    elif isinstance(value, (list, tuple)):
        for child in value:
            if isinstance(child, (dict, list, tuple)):
                _check_keys(child, depth + 1)


def encode_item(item: Any, index: int = 0) -> str:
    """Serialize one item to JSON text, or raise :class:`InvalidItemError`.

    Accepted: a ``dict`` with string keys whose values are JSON values (``str``, ``int``,
    finite ``float``, ``bool``, ``None``, ``list``/``tuple``, ``dict``).
    """
    if not isinstance(item, dict):
        raise InvalidItemError(
            f"item {index} is a {type(item).__name__}, not a dict: session items must be "
            "JSON objects (the SDK's input items are plain dicts)",
            index=index,
            item_type=type(item).__name__,
        )
    try:
        _check_keys(item, 0)
        text = _encode(item)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidItemError(
            f"item {index} ({type(item).__name__}) is not JSON-serializable: {exc}",
            index=index,
            item_type=type(item).__name__,
        ) from exc
    if text.isascii():  # O(1) in CPython: no surrogate to look for
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        # A lone surrogate is not Unicode text: no JSON decoder can give it back
        # unchanged (an escaped high+low pair decodes as ONE astral character).
        raise InvalidItemError(
            f"item {index} ({type(item).__name__}) contains a lone surrogate "
            f"{text[exc.start : exc.end]!r}, which is not valid Unicode text",
            index=index,
            item_type=type(item).__name__,
        ) from None
    return text


def _item_list(items: Iterable[Any]) -> list[Any]:
    if type(items) is list:  # the usual case, without the ABC check below
        return items
    if isinstance(items, (str, bytes, dict)) or not isinstance(items, Iterable):
        raise InvalidItemError(
            f"add_items() takes a list of items, not a {type(items).__name__}",
            index=-1,
            item_type=type(items).__name__,
        )
    return items if isinstance(items, list) else list(items)


def encode_items(items: Iterable[Any]) -> list[str]:
    """Serialize every item or none: the first bad one raises, naming its index."""
    return [encode_item(item, i) for i, item in enumerate(_item_list(items))]


#: Types :func:`_plain` takes as they are (``float`` is checked apart: finite only).
_SCALARS = frozenset({str, int, bool, type(None)})


def _plain(value: dict[Any, Any] | list[Any], depth: int) -> bool:
    """Whether ``value`` (a ``dict`` or a ``list``) holds only exact JSON types: ``dict``
    with ``str`` keys, ``list``, ``str``, ``int``, ``bool``, ``None`` and finite ``float``,
    at most :data:`_MAX_DEPTH` levels deep. Anything else (subclasses and tuples too) is
    left to :func:`encode_item`, which accepts or refuses it. (Every staged item is
    walked here: the commonest type, ``str``, is tested first, and an empty container
    is not entered.)"""
    if depth > _MAX_DEPTH:
        return False
    if type(value) is dict:
        for key in value:
            if type(key) is not str:
                return False
        children: Iterable[Any] = value.values()
    else:
        children = value
    for child in children:
        kind = type(child)
        if kind is str:
            continue
        if kind is dict or kind is list:
            if child and not _plain(child, depth + 1):
                return False
        elif kind in _SCALARS:
            continue
        elif kind is float:
            if child - child != 0:  # NaN or an infinity
                return False
        else:
            return False
    return True


def _encode_fast(item: Any) -> str | None:
    """``item`` as JSON text by orjson (several times faster than ``json``: a session
    encodes every item it stages), or ``None`` where only :func:`encode_item` can say.

    Only for :func:`_plain` items (judged by :func:`_plain_shape`, the walk
    :func:`encode_staged` makes, so tests of this function test that walk), whose JSON
    value is then the one ``json`` would
    write: orjson would write NaN as ``null`` and accept ``UUID`` or ``Enum`` values,
    which ``json`` refuses. It refuses, and :func:`encode_item` then judges, integers
    beyond 64 bits, lone surrogates and nesting past its own limit. The texts may
    differ from ``json``'s in float notation only (``1e+16`` is ``1e16``): the same
    value. Bulk writers (import, migration) keep ``json``: their batch ids hash texts.
    """
    if type(item) is not dict or _plain_shape(item) is None:
        return None
    try:
        return _dumps(item).decode()
    except orjson.JSONEncodeError:
        return None


def _plain_shape(item: dict[Any, Any]) -> dict[str, Any] | None:
    """For a ``dict`` item: its shape (:func:`~sessions._model.history.shape_of`) if the
    item is :func:`_plain`, else ``None``; one walk of its top level for both, where
    the two apart walk it twice (every staged item comes here). A plain item never
    holds a ``str`` subclass, the one case where ``shape_of`` gives ``None``."""
    shape: dict[str, Any] = {}
    for key, child in item.items():
        if type(key) is not str:
            return None
        kind = type(child)
        if kind is str:
            if key in SHAPE_FIELDS:
                shape[key] = child
            continue
        if kind is dict or kind is list:
            if child and not _plain(child, 1):
                return None
        elif kind is float:
            if child - child != 0:  # NaN or an infinity
                return None
        elif kind not in _SCALARS:
            return None
        if key in SHAPE_FIELDS:  # as shape_of: a non-string value is None or 0
            shape[key] = None if child is None else 0
    return shape


def encode_staged(items: Iterable[Any]) -> tuple[list[str], list[Shape]]:
    """:func:`encode_items`, and each item's shape (what the history rules read of it,
    :func:`sessions._model.history.shape_of`), taken from the same objects."""
    texts: list[str] = []
    shapes: list[Shape] = []
    for index, item in enumerate(_item_list(items)):
        if type(item) is dict:  # _encode_fast and shape_of, in this frame
            shape = _plain_shape(item)
            if shape is not None:
                try:
                    texts.append(_dumps(item).decode())
                except orjson.JSONEncodeError:
                    pass
                else:
                    shapes.append(shape)
                    continue
        texts.append(encode_item(item, index))
        shapes.append(shape_of(item))  # a dict: encode_item refuses anything else
    return texts, shapes


def decode_item(text: str) -> Any:
    """Parse stored JSON text. Raises ``ValueError`` on corrupt text."""
    return _decode(text)


def decode_rows(
    rows: Sequence[tuple[int, str]], session_id: str
) -> tuple[list[int], list[dict[str, Any]]]:
    """Decode stored rows into ``(keys, items)``, skipping (and logging) corrupt ones.

    A corrupt row is never deleted and never hides the valid rows around it.
    """
    try:  # the common case: every row is a valid JSON object
        items = [_decode(text) for _, text in rows]
    except (ValueError, TypeError):
        pass
    else:
        if all(type(item) is dict for item in items):
            return [key for key, _ in rows], items
    keys: list[int] = []
    items = []
    for key, text in rows:
        try:
            value = _decode(text)
        except (ValueError, TypeError) as exc:
            logger.warning(
                "session %r: skipping corrupt stored item (key %s): %s", session_id, key, exc
            )
            continue
        if not isinstance(value, dict):
            logger.warning(
                "session %r: skipping stored item (key %s) that is a %s, not an object",
                session_id,
                key,
                type(value).__name__,
            )
            continue
        keys.append(key)
        items.append(value)
    return keys, items
