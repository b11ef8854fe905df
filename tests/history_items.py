"""Item builders shared by the pairing-rule tests (unit and contract)."""

from __future__ import annotations

from typing import Any


def user(text: str = "hi") -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str = "ok", item_id: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "message", "role": "assistant", "content": text}
    if item_id is not None:
        item["id"] = item_id
    return item


def call(kind: str, key: str) -> dict[str, Any]:
    if kind == "mcp_approval_request":
        return {"type": kind, "id": key, "name": "t", "arguments": "{}", "server_label": "s"}
    return {"type": kind, "call_id": key}


def output(kind: str, key: str) -> dict[str, Any]:
    if kind == "mcp_approval_response":
        return {"type": kind, "approval_request_id": key, "approve": True}
    return {"type": kind, "call_id": key, "output": "done"}


def reasoning(item_id: str = "rs_1") -> dict[str, Any]:
    return {"type": "reasoning", "id": item_id, "summary": []}
