"""A stand-in for ``agents.testing`` on openai-agents releases before 0.21.0.

Same shape as the SDK's own: ``ScriptedModel(steps)`` where a step is the list of output
items one model call returns (or an exception it raises), ``.calls`` / ``.first_call`` /
``.last_call`` recording each call's input, and the ``assistant_message`` /
``function_call`` item builders. Streamed calls emit ``response.created``, an
``output_item.added`` / ``output_item.done`` pair per item and ``response.completed``,
which is what every release's streaming loop reads. Import it through ``tests.sdk``,
which picks the SDK's own where the release has it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseFunctionToolCall,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
)

Step = list[Any] | BaseException


@dataclass(frozen=True)
class ModelCall:
    """One recorded model call (the fields the tests read)."""

    system_instructions: str | None
    input: Any
    streamed: bool


class ScriptedModel(Model):
    """Answers each model call with the next scripted step; fails when none is left."""

    def __init__(self, steps: Iterable[Step] = ()) -> None:
        self._steps = list(steps)
        self._calls: list[ModelCall] = []

    @property
    def calls(self) -> tuple[ModelCall, ...]:
        return tuple(self._calls)

    @property
    def first_call(self) -> ModelCall | None:
        return self._calls[0] if self._calls else None

    @property
    def last_call(self) -> ModelCall | None:
        return self._calls[-1] if self._calls else None

    def _next(self, system_instructions: str | None, input: Any, streamed: bool) -> list[Any]:
        self._calls.append(ModelCall(system_instructions, copy.deepcopy(input), streamed))
        if not self._steps:
            raise AssertionError(f"unexpected model call #{len(self._calls)}: no step left")
        step = self._steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        return list(step)

    async def get_response(
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        output = self._next(system_instructions, input, streamed=False)
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    async def stream_response(
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        output = self._next(system_instructions, input, streamed=True)
        n = 0
        yield ResponseCreatedEvent(
            type="response.created", response=response([]), sequence_number=n
        )
        for index, item in enumerate(output):
            n += 1
            yield ResponseOutputItemAddedEvent(
                type="response.output_item.added", item=item, output_index=index, sequence_number=n
            )
            n += 1
            yield ResponseOutputItemDoneEvent(
                type="response.output_item.done", item=item, output_index=index, sequence_number=n
            )
        yield ResponseCompletedEvent(
            type="response.completed", response=response(output), sequence_number=n + 1
        )


def response(output: list[Any]) -> Response:
    """A completed Responses API response with ``output``."""
    return Response(
        id="scripted-response",
        created_at=0,
        model="scripted-model",
        object="response",
        output=output,
        tool_choice="none",
        tools=[],
        top_p=None,
        parallel_tool_calls=False,
    )


def assistant_message(text: str, *, item_id: str = "scripted-message") -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=item_id,
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def function_call(
    name: str, arguments: str | Mapping[str, Any], *, call_id: str, item_id: str | None = None
) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=call_id if item_id is None else item_id,
        call_id=call_id,
        type="function_call",
        name=name,
        arguments=arguments
        if isinstance(arguments, str)
        else json.dumps(arguments, ensure_ascii=False, separators=(",", ":")),
    )
