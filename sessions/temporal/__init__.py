"""``sessions.temporal``: sessions that stay exactly-once inside Temporal workflows
(``pip install 'txsessions[temporal]'``; ``docs/temporal.md``).

* :class:`TemporalSession`: ``Runner.run(agent, text, session=...)`` in workflow code
  under the OpenAI Agents plugin; staging in workflow state, reads and commits as
  activities, each commit's batch id derived from the workflow id, run id and position.
* :func:`activity_session`: a whole agent turn inside one activity (no plugin); its
  commit's batch id derived from the workflow and activity identity.
* :class:`SessionsPlugin`: the worker side (the activities, the store's lifecycle).
"""

from __future__ import annotations

try:
    import temporalio  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "sessions.temporal needs temporalio: pip install 'txsessions[temporal]'"
    ) from exc

from .activity import ActivityTurn, activity_session
from .ids import activity_batch_id, lineage_of, turn_tag, workflow_batch_id
from .payloads import SessionCarry
from .worker import SessionsPlugin, current_store
from .workflow import TemporalSession

__all__ = [
    "ActivityTurn",
    "SessionCarry",
    "SessionsPlugin",
    "TemporalSession",
    "activity_batch_id",
    "activity_session",
    "current_store",
    "lineage_of",
    "turn_tag",
    "workflow_batch_id",
]
