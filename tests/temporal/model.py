"""The agents' model on the workers: ``agents.testing``'s ``ScriptedModel`` (the stand-in
of ``tests/scripted.py`` on SDK releases before it), one scripted step per call,
chosen from the call's input, so any worker process answers any turn:

* the latest user message starting with ``transfer`` and no tool output after it: a call
  of the ``transfer`` tool (which needs approval);
* anything else: ``echo: <latest user text> [<nonce>]``, where the nonce is new on
  every call, so a turn answered twice (a duplicate) can be told from one answered once.
"""

from __future__ import annotations

import uuid
from typing import Any

from agents import Model, ModelProvider

from tests.sdk import ScriptedModel, assistant_message, function_call


def _text(item: Any) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def reply_for(input: str | list[Any]) -> list[Any]:
    """The scripted step (the output items) answering ``input``."""
    items: list[Any] = [{"role": "user", "content": input}] if isinstance(input, str) else input
    last = max(
        (
            i
            for i, item in enumerate(items)
            if isinstance(item, dict) and item.get("role") == "user"
        ),
        default=-1,
    )
    text = _text(items[last]) if last >= 0 else ""
    answered = any(
        isinstance(item, dict) and item.get("type") == "function_call_output"
        for item in items[last + 1 :]
    )
    if text.startswith("transfer") and not answered:
        call_id = "call-" + uuid.uuid5(uuid.NAMESPACE_URL, text).hex[:12]
        return [function_call("transfer", {"amount": 5}, call_id=call_id)]
    return [assistant_message(f"echo: {text} [{uuid.uuid4().hex[:8]}]")]


def plain(value: Any) -> Any:
    """``value`` as plain lists and dicts: the plugin's model activity hands over input
    its pydantic converter made, with lazy iterables ScriptedModel cannot copy."""
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        return plain(model_dump())
    return [plain(item) for item in value]


class EchoModel(Model):
    """A model answering each call with a ``ScriptedModel`` of one step (``reply_for``)."""

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kw: Any
    ) -> Any:
        input = plain(input)
        scripted = ScriptedModel([reply_for(input)])
        return await scripted.get_response(system_instructions, input, *args, **kw)

    def stream_response(self, *args: Any, **kw: Any) -> Any:
        raise NotImplementedError("the Temporal tests do not stream")


class EchoProvider(ModelProvider):
    def get_model(self, model_name: str | None) -> Model:
        return EchoModel()
