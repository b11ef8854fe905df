"""The installed openai-agents release and what it offers, detected once.

The matrix (``python tools/matrix.py``) runs the ``sdk_flow`` tests on every supported
release, from the oldest declared one on, so every test module must import on all of
them. A test that needs something a release added asks here instead of importing it
blindly:

* :func:`need_sdk` skips the test on a release older than the one that added the
  feature, with a reason saying so (the only kind of skip the CI skip policy accepts for
  the SDK, see ``tests/skip_policy.py``), and fails it where the release should have the
  feature but does not: an SDK change we must hear about, never a silent skip.
  :func:`sdk_import` does the same around an import.
* ``ScriptedModel``, ``assistant_message`` and ``function_call`` are
  ``agents.testing``'s (added in 0.21.0); before that release, the stand-in in
  ``tests/scripted.py``, which has the same shape.

``SINCE`` names each feature's first release (read from the released wheels).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from typing import Any

import pytest

SDK_VERSION_TEXT = importlib.metadata.version("openai-agents")
SDK_VERSION: tuple[int, ...] = tuple(int(n) for n in re.findall(r"\d+", SDK_VERSION_TEXT)[:3])

#: The first openai-agents release with each feature the tests use.
SINCE: dict[str, tuple[int, ...]] = {
    # The runner saves the input before the first model call and each turn's items as
    # the turn ends (before: the whole run in one add_items call at its end)
    "per_turn_saves": (0, 3, 0),
    # Runner.run* accept a list input together with a session (0.2.x: UserError "Cannot
    # provide both a session and a list of input items")
    "list_input_with_session": (0, 3, 0),
    # RunConfig(session_input_callback=...)
    "session_input_callback": (0, 3, 0),
    # agents.extensions.memory.encrypt_session.EncryptedSession
    "EncryptedSession": (0, 3, 1),
    # agents.extensions.memory.redis_session.RedisSession
    "RedisSession": (0, 3, 3),
    # RunResultStreaming.cancel(mode=...); and stream_events() waits for the run task
    # before it cleans up, so the streamed-run race of 0.2.x and 0.3.x is gone
    "cancel_mode": (0, 4, 0),
    "no_stream_cleanup_race": (0, 4, 0),
    # Runner.run_sync works in a thread with no event loop set (it makes one; before:
    # asyncio.get_event_loop() raised "There is no current event loop in thread ...")
    "run_sync_in_any_thread": (0, 5, 0),
    # agents.extensions.memory.AdvancedSQLiteSession (branches: message_structure; usage
    # per user turn: turn_usage)
    "AdvancedSQLiteSession": (0, 3, 3),
    # agents.extensions.memory.AsyncSQLiteSession
    "AsyncSQLiteSession": (0, 7, 0),
    # stream_events() re-raises its consumer's cancellation (before: ended the stream)
    "stream_events_reraises_cancel": (0, 7, 0),
    # agents.memory.session_settings.SessionSettings and RunConfig.session_settings;
    # RunResultStreaming.run_loop_task; tool approvals (needs_approval, RunState)
    "SessionSettings": (0, 8, 0),
    "run_loop_task": (0, 8, 0),
    "approvals": (0, 8, 0),
    # agents.memory.session_settings.coerce_session_settings
    "coerce_session_settings": (0, 19, 0),
    # With a session_input_callback, the runner saves only the turn's new input items
    # (before: whatever the callback returned beyond the history, duplicates included)
    "input_callback_saves_new_items_only": (0, 10, 3),
    # agents.testing (ScriptedModel and friends)
    "agents.testing": (0, 21, 0),
}


def has(feature: str) -> bool:
    """Whether the installed release is at least the one that added ``feature``."""
    return SDK_VERSION >= SINCE[feature]


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def need_sdk(feature: str, present: bool | None = None, *, why: str = "") -> None:
    """Skip the calling test (or module) when the installed SDK predates ``feature``.

    ``present`` is the feature as detected (an import that worked, an attribute found):
    when the installed release is new enough but ``present`` is False, the test fails,
    because the release should have it.
    """
    since = SINCE[feature]
    if SDK_VERSION < since:
        pytest.skip(
            f"needs openai-agents >= {_dotted(since)} for {feature} (installed {SDK_VERSION_TEXT})",
            allow_module_level=True,
        )
    if present is False:
        pytest.fail(
            f"openai-agents {SDK_VERSION_TEXT} should have {feature} "
            f"(added in {_dotted(since)}) but does not{why}",
            pytrace=False,
        )


def sdk_import(feature: str, module: str, name: str) -> Any:
    """``from <module> import <name>`` for a test that needs ``feature`` (see need_sdk)."""
    need_sdk(feature)
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        need_sdk(feature, present=False, why=f": {type(exc).__name__}: {exc}")
        raise  # not reached: need_sdk failed the test


def run_task(result: Any) -> Any:
    """The background task of a streamed run (``_run_impl_task`` before 0.8.0)."""
    name = "run_loop_task" if has("run_loop_task") else "_run_impl_task"
    return getattr(result, name)


try:
    from agents.testing import ScriptedModel, assistant_message, function_call
except ImportError:
    if has("agents.testing"):
        raise  # the release should have it: let the import error show
    from tests.scripted import (  # type: ignore[assignment]
        ScriptedModel,
        assistant_message,
        function_call,
    )

__all__ = [
    "SDK_VERSION",
    "SDK_VERSION_TEXT",
    "SINCE",
    "ScriptedModel",
    "assistant_message",
    "function_call",
    "has",
    "need_sdk",
    "run_task",
    "sdk_import",
]
