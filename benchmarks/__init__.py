"""Benchmarks: txsessions against the Agents SDK's own sessions and raw-driver floors.

Run ``python -m benchmarks`` (full, about 10-15 minutes, writes ``benchmarks/results/``)
or ``python -m benchmarks --quick`` (under a minute, tiny sizes, writes to a temporary
directory; proves the benchmarks still work, says nothing about speed).
See ``docs/benchmarks.md``.
"""
