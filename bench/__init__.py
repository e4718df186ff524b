"""The benchmark: the agent against baselines on the lab worlds, in one process on one machine.

`python -m bench [--worlds NAME ...] [--json]` runs, for every world under ``lab/worlds/`` (or the
ones named): the agent (rule planner, auto-approve, through the real graph and CLI), a random
one-change baseline (mean of several seeds), the human sequence of the motivating case (world 1), and
delta debugging over the differences to a known-good finding where one exists. Baselines launch the
real lab server through ``tools`` (ServerSession, probes, stall watch) and judge success by probes;
a world's ``[truth]`` is read only to score "correct root cause".
"""

from bench.run import BenchResult, run_bench

__all__ = ["BenchResult", "run_bench"]
