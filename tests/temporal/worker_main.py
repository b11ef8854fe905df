"""A worker process for the Temporal tests and the soak:

    python -m tests.temporal.worker_main ADDRESS TASK_QUEUE STORE_URL [FAULT]

It runs the test workflows and the ``agent_turn`` activity, with the OpenAI Agents
plugin (model: ``model.EchoProvider``), a ``SessionsPlugin`` on STORE_URL and the
commit fault FAULT (``faults.py``), until SIGTERM or SIGKILL."""

from __future__ import annotations

import asyncio
import signal
import sys
from datetime import timedelta

from temporalio.worker import Worker

from sessions.temporal import SessionsPlugin
from tests.temporal.faults import CommitFaults
from tests.temporal.harness import connect
from tests.temporal.turn_activity import agent_turn
from tests.temporal.workflows import WORKFLOWS


async def main(address: str, queue: str, store_url: str, fault: str) -> None:
    client = await connect(address)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    worker = Worker(
        client,
        task_queue=queue,
        workflows=WORKFLOWS,
        activities=[agent_turn],
        plugins=[SessionsPlugin(store_url)],
        interceptors=[CommitFaults(fault)],
        # A killed worker's workflows move to a live one sooner (default 10 s).
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=2),
    )
    async with worker:
        print("worker ready", flush=True)
        await stop.wait()


if __name__ == "__main__":
    address, queue, url = sys.argv[1:4]
    asyncio.run(main(address, queue, url, sys.argv[4] if len(sys.argv) > 4 else "none"))
