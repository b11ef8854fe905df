"""The ids that make a Temporal workflow's commits exactly-once (``docs/temporal.md``).

Pure functions of their inputs, no I/O, no ``temporalio``: the same arguments give the
same id in every process, on every replay and on every retry.

* :func:`workflow_batch_id`: a commit of a :class:`~sessions.temporal.TemporalSession`
  (workflow code): the workflow id, the run id and the commit's position in the workflow
  (1, 2, ... carried on across continue-as-new).
* :func:`activity_batch_id`: the commit of :func:`~sessions.temporal.activity_session`
  (an agent turn run inside one activity): the workflow id, the run id, the activity id
  and the part (which of the activity's commits to that session); never the attempt.
* :func:`lineage_of` / :func:`turn_tag`: the run id a workflow's turns are stored
  with (``session.turns()``): the workflow id and its first run id (kept by retries,
  resets and continue-as-new) hashed, and the commit's position. This is how a reset
  run recognises the turns of the run it replaced.
"""

from __future__ import annotations

import hashlib

__all__ = [
    "activity_batch_id",
    "lineage_of",
    "parse_turn_tag",
    "turn_tag",
    "workflow_batch_id",
]

#: Batch-id namespaces: ``twf`` for workflow commits, ``tac`` for activity commits.
WORKFLOW_NAMESPACE = "twf"
ACTIVITY_NAMESPACE = "tac"
TAG_PREFIX = "temporal:"


def _text(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if not value or "\0" in value:
        raise ValueError(f"{name} must be a non-empty str without NUL, got {value!r}")
    return value


def _count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def _digest(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()[:40]


def workflow_batch_id(workflow_id: str, run_id: str, position: int) -> str:
    """The batch id of a workflow's commit number ``position`` made in run ``run_id``."""
    parts = (_text(workflow_id, "workflow_id"), _text(run_id, "run_id"))
    return f"{WORKFLOW_NAMESPACE}-" + _digest(*parts, str(_count(position, "position")))


def activity_batch_id(workflow_id: str, run_id: str, activity_id: str, part: int = 1) -> str:
    """The batch id of commit ``part`` of activity ``activity_id`` of a workflow run (the
    same for every attempt of that activity)."""
    parts = (
        _text(workflow_id, "workflow_id"),
        _text(run_id, "run_id"),
        _text(activity_id, "activity_id"),
    )
    return f"{ACTIVITY_NAMESPACE}-" + _digest(*parts, str(_count(part, "part")))


def lineage_of(workflow_id: str, first_run_id: str) -> str:
    """What every run of one workflow execution chain shares (its retries, resets and
    continue-as-new runs), and a new workflow started later with the same id does not."""
    return _digest(_text(workflow_id, "workflow_id"), _text(first_run_id, "first_run_id"))[:24]


def turn_tag(lineage: str, position: int) -> str:
    """The run id the turn of commit ``position`` of ``lineage`` is stored with."""
    return f"{TAG_PREFIX}{_text(lineage, 'lineage')}:{_count(position, 'position')}"


def parse_turn_tag(tag: str | None) -> tuple[str, int] | None:
    """``(lineage, position)`` of a turn's run id made by :func:`turn_tag`, else ``None``."""
    if tag is None or not tag.startswith(TAG_PREFIX):
        return None
    lineage, _, position = tag[len(TAG_PREFIX) :].rpartition(":")
    if not lineage or not position.isdigit() or position.startswith("0"):
        return None
    return lineage, int(position)
