"""Programs of the state machine for each finding of the model on b92b180 (issue 28),
run on every backend: the random search of ``test_model.py`` may take long to hit
them, so they are kept here by hand, each named by what it proves."""

from __future__ import annotations

from typing import Any

import pytest

from tests.provision import PROVISIONS

from .machine import ModelMachine

Step = tuple[str, dict[str, Any]]

#: Indexes into ``harness.LAYOUT``: 0 = "a" buffered, 1 = "a" autocommit (store 0),
#: 2 = "b" buffered, 4 = "a" buffered on the second store, 8 = "f1" buffered.
PROGRAMS: dict[str, list[Step]] = {
    "get_items_turns_never_starts_with_an_output_whose_call_is_in_an_earlier_turn": [
        ("autocommit_tool_run", {"index": 1}),
        ("get_items", {"index": 0, "how": "turns", "n": 1}),
    ],
    "rewind_refuses_a_cut_between_a_call_and_its_output": [
        ("autocommit_tool_run", {"index": 1}),
        ("rewind", {"index": 0, "to": "cut"}),
    ],
    "fork_refuses_a_cut_between_a_call_and_its_output": [
        ("autocommit_tool_run", {"index": 1}),
        ("fork", {"index": 0, "dst": "f1", "at": "cut"}),
    ],
    "a_fork_into_a_session_holding_items_is_a_conflict": [
        ("transaction", {"index": 0, "units": ["user"], "boom": False, "orphan": False}),
        ("transaction", {"index": 0, "units": ["user"], "boom": False, "orphan": False}),
        ("transaction", {"index": 2, "units": ["user"], "boom": False, "orphan": False}),
        ("fork", {"index": 0, "dst": "b", "at": None}),
        ("fork", {"index": 0, "dst": "f1", "at": 1}),
        ("fork", {"index": 0, "dst": "f1", "at": None}),
    ],
    "repeated_fork_into_a_target_that_lost_its_turns_is_a_conflict": [
        ("autocommit_tool_run", {"index": 1}),
        ("fork", {"index": 0, "dst": "f1", "at": None}),
        ("clear_session", {"index": 8}),
        ("commit", {"index": 8, "how": "plain"}),
        ("fork", {"index": 0, "dst": "f1", "at": None}),
    ],
    "undo_rewind_with_nothing_hidden_writes_nothing": [
        ("undo_rewind", {"index": 0}),
    ],
    "a_deleted_sessions_object_refuses_to_write_into_the_next_life": [
        ("clear_session", {"index": 1}),
        ("get_items", {"index": 1, "how": "all", "n": 0}),
        ("delete_session", {"store": 0, "sid": "a"}),
        ("clear_session", {"index": 1}),
    ],
    # Found at 80ccfbe by a shrink that slipped while a planted defect was hunted.
    "a_pop_that_would_leave_another_writers_output_without_its_call_is_refused": [
        ("transaction", {"index": 0, "units": ["user"], "boom": False, "orphan": False}),
        ("transaction", {"index": 0, "units": ["user"], "boom": False, "orphan": False}),
        ("commit", {"index": 0, "how": "plain"}),
        *[("pop_item", {"index": 0})] * 5,
        ("export_import", {"dst": "a", "mode": "skip", "src": "a", "store": 0}),
        ("transaction", {"index": 0, "units": ["user", "open"], "boom": False, "orphan": False}),
        *[("pop_item", {"index": 0})] * 4,
        ("add_items", {"index": 5, "units": ["user"]}),
        ("transaction", {"index": 0, "units": ["user"], "boom": False, "orphan": False}),
    ],
    # Found by the py3.12 matrix cell: a pop that finds nothing stored still read it.
    "a_pop_of_an_empty_session_learns_its_life": [
        ("clear_session", {"index": 3}),
        ("pop_item", {"index": 6}),
        ("purge", {"how": "older_than", "store": 0}),
        ("undo_rewind", {"index": 6}),
    ],
    "transaction_rolls_back_a_batch_the_commit_refused": [
        ("transaction", {"index": 0, "units": ["user"], "boom": False, "orphan": True}),
        ("commit", {"index": 0, "how": "plain"}),
    ],
    "metadata_with_a_non_string_key_is_refused": [
        ("set_info", {"index": 0, "change": ({"metadata": {1: "int key"}}, False)}),
    ],
    "a_ttl_beyond_the_maximum_is_refused": [
        (
            "set_info",
            {"index": 0, "change": ({"ttl": __import__("datetime").timedelta.max}, False)},
        ),
    ],
    "a_run_id_that_is_not_valid_text_is_refused": [
        ("set_run_id", {"index": 0, "run_id": "bad\ud800"}),
    ],
    "usage_beyond_64_bits_is_refused": [
        ("add_items", {"index": 0, "units": ["user"]}),
        ("record_usage", {"index": 0, "usage": (1, 2**63, 0, 0, 0)}),
    ],
    "a_turn_keeps_the_run_id_set_when_its_first_item_was_staged": [
        ("add_items", {"index": 4, "units": ["user"]}),
        ("set_run_id", {"index": 4, "run_id": "r1"}),
        ("add_items", {"index": 4, "units": ["user"]}),
        ("commit", {"index": 4, "how": "plain"}),
    ],
    "a_commit_that_goes_past_another_writers_pending_call_is_stored_unjudged": [
        ("add_items", {"index": 2, "units": ["user"]}),
        ("transaction", {"index": 6, "units": ["user", "open"], "boom": False, "orphan": False}),
        ("commit", {"index": 2, "how": "plain"}),
    ],
    "a_pop_staged_before_a_deletion_never_removes_an_item_of_the_next_life": [
        ("transaction", {"index": 0, "units": ["user"], "boom": False, "orphan": False}),
        ("get_items", {"index": 0, "how": "all", "n": 0}),
        ("pop_item", {"index": 0}),
        ("delete_session", {"store": 1, "sid": "a"}),
        ("transaction", {"index": 4, "units": ["user", "pair"], "boom": False, "orphan": False}),
        ("commit", {"index": 0, "how": "plain"}),
    ],
    "versions_restart_from_zero_after_a_deletion": [
        ("transaction", {"index": 0, "units": ["user"], "boom": False, "orphan": False}),
        ("transaction", {"index": 0, "units": ["user"], "boom": False, "orphan": False}),
        ("delete_session", {"store": 1, "sid": "a"}),
        ("transaction", {"index": 4, "units": ["user"], "boom": False, "orphan": False}),
        ("get_items", {"index": 4, "how": "all", "n": 0}),
    ],
    "a_staged_clear_keeps_the_version_read_and_commits_against_it": [
        ("transaction", {"index": 0, "units": ["user"], "boom": False, "orphan": False}),
        ("get_items", {"index": 0, "how": "all", "n": 0}),
        ("clear_session", {"index": 0}),
        ("get_items", {"index": 0, "how": "all", "n": 0}),
        ("commit", {"index": 0, "how": "seen"}),
    ],
    "deleting_a_source_deletes_its_branch_list": [
        ("transaction", {"index": 2, "units": ["user"], "boom": False, "orphan": False}),
        ("fork", {"index": 2, "dst": "a", "at": None}),
        ("delete_session", {"store": 0, "sid": "b"}),
    ],
}


def run_program(kind: str, steps: list[Step], schema: str | None = None) -> None:
    machine = type(f"Program_{kind}", (ModelMachine,), {"kind": kind, "pg_schema": schema})()
    try:
        machine.everything_reads_as_the_model_says()
        for name, arguments in steps:
            getattr(machine, name)(**arguments)
            machine.everything_reads_as_the_model_says()
    finally:
        machine.teardown()


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_program(kind: str, name: str, request: Any) -> None:
    schema = PROVISIONS[kind].test_schema(request)
    run_program(kind, PROGRAMS[name], schema)
