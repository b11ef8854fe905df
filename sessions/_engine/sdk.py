"""Everything this package knows about the Agents SDK beyond its public ``Session`` protocol.

Some SDK flows look for optional, private hooks on a session and use them when found:

* ``session._get_compaction_snapshot(limit, *, prune_prefix=None)`` (openai-agents 0.23+):
  ``OpenAIResponsesCompactionSession`` asks the session it wraps for the latest items
  and a ``replace_suffix(start, output)`` coroutine that swaps the end of the history
  for the compacted output in one step, if that end is unchanged. The result must be
  an ``agents.memory.session._CompactionSnapshot``.
* ``type(session)._atomic_replace_items(session, items)`` (0.24+): replace the whole
  history in one step (the SDK otherwise clears and re-adds, two steps).
* a ``wrapper`` keyword on ``get_items`` / ``add_items`` / ``pop_item`` /
  ``clear_session`` (0.20+): the runner then passes the run context.

Our sessions offer the two compaction hooks only where no override of ``get_items``,
``add_items``, ``pop_item`` or ``clear_session`` in a subclass would be bypassed (see
``sessions._engine.session.compaction._offers_hook`` and ``docs/sdk-flows.md``), as the SDK does
for its own sessions.

Those hooks are not public API, so every use of them is here, detected at run time:
an SDK release without one simply never calls it, and one whose shape changed makes
the feature switch off (``None`` / ``False``) instead of failing somewhere else.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = [
    "accepts_run_context",
    "atomic_replace_hook",
    "call_session_method",
    "coerce_session_settings",
    "default_session_settings",
    "make_compaction_snapshot",
    "run_state_from_text",
    "serialize_run_state",
    "snapshot_hook",
]

ReplaceSuffix = Callable[[int, list[Any]], Awaitable[bool]]


# --------------------------------------------------------------------------- settings


def _settings_class() -> type[Any] | None:
    try:
        from agents.memory.session_settings import SessionSettings
    except ImportError:  # openai-agents releases before SessionSettings (0.8.0)
        return None
    return SessionSettings


def default_session_settings() -> Any:
    """``SessionSettings()`` where the SDK has the class, else ``None``."""
    cls = _settings_class()
    return None if cls is None else cls()


def coerce_session_settings(value: object, name: str = "session_settings") -> Any:
    """A ``SessionSettings`` from an instance, a dict (unknown keys refused) or ``None``.

    ``None`` gives the default, ``SessionSettings()``. The SDK's own coercion is not
    used: before openai-agents 0.19 there is none, and ours names the bad key the same
    way on every release.
    """
    cls = _settings_class()
    if value is None:
        return None if cls is None else cls()
    if cls is None:
        raise TypeError(
            f"{name} needs an openai-agents release that has "
            "agents.memory.session_settings.SessionSettings (0.8.0 or later); upgrade "
            "openai-agents or pass limit= to get_items()"
        )
    if isinstance(value, cls):
        return value
    if not isinstance(value, dict):
        raise TypeError(
            f"{name} must be an agents SessionSettings or a dict, got {type(value).__name__}"
        )
    known = [field.name for field in dataclasses.fields(cls)]
    unknown = sorted(str(key) for key in value if key not in known)
    if unknown:  # worded as the SDK's own coercion (0.19 on) words it
        raise TypeError(
            f"Unknown {name} settings: {', '.join(unknown)} "
            f"(SessionSettings has: {', '.join(known)})"
        )
    try:
        return cls(**value)
    except Exception as exc:  # noqa: BLE001 - pydantic's validation error, restated
        raise TypeError(f"{name} {value!r} is not valid: {exc}") from None


# --------------------------------------------------------------------------- run context


def accepts_run_context(method: object) -> bool:
    """Whether ``method`` takes a ``wrapper`` keyword (the SDK's opt-in for the run context)."""
    try:
        parameters = inspect.signature(method).parameters.values()  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return any(
        p.name == "wrapper" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        for p in parameters
    )


async def call_session_method(method: Any, *args: Any, context: Any = None) -> Any:
    """``method(*args)``, with ``wrapper=context`` when it takes one and there is one.

    Awaits the result when it is awaitable (sessions may be sync or async).
    """
    if context is not None and accepts_run_context(method):
        result = method(*args, wrapper=context)
    else:
        result = method(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


# --------------------------------------------------------------------------- compaction


def _snapshot_class() -> type[Any] | None:
    try:
        from agents.memory.session import _CompactionSnapshot
    except ImportError:  # before openai-agents 0.23
        return None
    return _CompactionSnapshot


def make_compaction_snapshot(items: list[Any], complete: bool, replace: ReplaceSuffix) -> Any:
    """The SDK's snapshot object, or ``None`` when this SDK release has no such hook."""
    cls = _snapshot_class()
    if cls is None:
        return None
    try:
        return cls(items, complete, replace)
    except TypeError:  # its shape changed: let the SDK fall back to its generic path
        return None


def snapshot_hook(session: object) -> Callable[..., Awaitable[Any]] | None:
    """A wrapped session's own ``_get_compaction_snapshot``, if it has one."""
    hook = getattr(session, "_get_compaction_snapshot", None)
    return hook if callable(hook) else None


def atomic_replace_hook(session: object) -> Callable[[Any, list[Any]], Awaitable[Any]] | None:
    """A wrapped session type's own ``_atomic_replace_items``, if it has one."""
    hook = getattr(type(session), "_atomic_replace_items", None)
    return hook if callable(hook) else None


# --------------------------------------------------------------------------- run state


def serialize_run_state(state: object) -> str:
    """The JSON text of a ``RunState`` (``state.to_string()``), or ``state`` if already text."""
    if isinstance(state, str):
        return state
    to_string = getattr(state, "to_string", None)
    if not callable(to_string):
        raise TypeError(
            "stage_run_state() takes an agents RunState (result.to_state()) or the text of "
            f"one (state.to_string()), got {type(state).__name__}"
        )
    text = to_string()
    if not isinstance(text, str):
        raise TypeError(f"{type(state).__name__}.to_string() returned {type(text).__name__}")
    return text


async def run_state_from_text(agent: Any, text: str, options: dict[str, Any]) -> Any:
    """``RunState.from_string(agent, text, **options)``."""
    try:
        from agents.run_state import RunState
    except ImportError:  # before tool approvals (openai-agents 0.8.0)
        raise TypeError(
            "load_run_state() needs an openai-agents release with agents.run_state.RunState "
            "(0.8.0 or later); use load_run_state_text() for the stored text"
        ) from None
    return await RunState.from_string(agent, text, **options)
