"""Sizes for a full run and for ``--quick`` (which only proves the benchmarks work)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Config:
    quick: bool
    # (a) one session, commit per turn
    a_turns: int
    a_rounds: int
    # (b) one session, 5-turn run committed once
    b_runs: int
    b_rounds: int
    # (c) many sessions at once
    concurrency: list[int]
    c_turns: int  # total timed turns per level (at least 2 per session)
    #: PostgreSQL levels timed with more turns per round than ``c_turns``: the 100-session
    #: target is a median of rounds of at least 8,000 turns (rounds of 2,000 swing widely)
    c_turns_pg: dict[int, int]
    c_timeout: float  # seconds allowed per subject, level and round
    c_rounds: int
    pool: int  # PostgreSQL pool size, the same for every PostgreSQL subject
    # (d) reads
    history: list[int]
    sessions: list[int]
    read_reps_limit: int
    read_rounds: int
    read_budget_full: int  # items decoded per size for full reads (bounds repetitions)
    # (e) memory
    mem_turns: int
    mem_warmup: int
    mem_sessions: int
    agent_runs: int
    # (g) peers: sessions of peers_session_turns turns; at level 1 about peers_turns turns
    # per round (whole sessions), at more sessions one session per task
    peers_session_turns: int = 20
    peers_levels: list[int] = field(default_factory=lambda: [1, 100])
    peers_turns: int = 100
    peers_rounds: int = 3
    peers_timeout: float = 30.0  # seconds per subject, level and round: no turn starts later
    rounds_note: str = field(default="")

    @classmethod
    def full(cls) -> Config:
        return cls(
            quick=False,
            a_turns=400,
            a_rounds=9,
            b_runs=30,
            b_rounds=7,
            concurrency=[1, 10, 100, 500],
            c_turns=2000,
            c_turns_pg={100: 8000},
            c_timeout=60.0,
            c_rounds=5,
            pool=20,
            history=[100, 1_000, 10_000, 100_000],
            sessions=[100, 1_000, 10_000],
            read_reps_limit=100,
            read_rounds=5,
            read_budget_full=300_000,
            mem_turns=10_000,
            mem_warmup=1_000,
            mem_sessions=100,
            agent_runs=30,
        )

    @classmethod
    def quick_(cls) -> Config:
        return cls(
            quick=True,
            a_turns=20,
            a_rounds=1,
            b_runs=5,
            b_rounds=1,
            concurrency=[1, 8],
            c_turns=24,
            c_turns_pg={},
            c_timeout=20.0,
            c_rounds=1,
            pool=4,
            history=[100, 500],
            sessions=[20, 60],
            read_reps_limit=3,
            read_rounds=1,
            read_budget_full=1_000,
            mem_turns=200,
            mem_warmup=50,
            mem_sessions=10,
            agent_runs=2,
            peers_session_turns=4,
            peers_levels=[1, 8],
            peers_turns=8,
            peers_rounds=1,
            peers_timeout=20.0,
        )
