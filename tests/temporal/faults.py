"""Faults injected into a worker's commit activities (a worker interceptor: the real
activity runs, then its worker fails or dies; nothing is simulated).

* ``kill-before-commit``: the worker SIGKILLs itself as a commit activity starts (its
  first attempt): nothing was written.
* ``kill-after-commit``: the worker SIGKILLs itself once the commit reached the
  database, before Temporal hears of it.
* ``fail-after-commit``: the commit reached the database, then the attempt raises;
  every commit's first attempt fails this way.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from sessions.temporal.workflow import COMMIT_ACTIVITY

FAULTS = ("none", "kill-before-commit", "kill-after-commit", "fail-after-commit")


class CommitFaults(Interceptor):
    def __init__(self, fault: str) -> None:
        if fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS}, got {fault!r}")
        self.fault = fault

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Inbound(next, self.fault)


class _Inbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, fault: str) -> None:
        super().__init__(next)
        self.fault = fault

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        hit = info.activity_type == COMMIT_ACTIVITY and info.attempt == 1
        if hit and self.fault == "kill-before-commit":
            os.kill(os.getpid(), signal.SIGKILL)
        result = await super().execute_activity(input)
        if hit and self.fault == "kill-after-commit":
            os.kill(os.getpid(), signal.SIGKILL)
        if hit and self.fault == "fail-after-commit":
            raise ApplicationError(
                "injected: the batch reached the database, then this attempt failed"
            )
        return result
