"""Which exact partition solver answers a problem: the fast path, the chain program or CP-SAT."""

from __future__ import annotations

from solver.partition.chain import solve_chain
from solver.partition.fast import solve_fast
from solver.partition.problem import PartitionProblem, PartitionSolution
from solver.partition.tail import identical_tail_start, solve_tail

# Above this many (stage, start, end) entries the exact chain tables (8 bytes each) grow past
# ~160 MiB; CP-SAT's boundary model takes over.
CHAIN_TABLE_LIMIT = 20_000_000


def uses_cpsat(problem: PartitionProblem) -> bool:
    """Whether ``solve`` answers ``problem`` with CP-SAT, whose answer may depend on its time limit
    (every other solver's is a function of the problem alone)."""
    return not problem.identical_layers and problem.num_stages * problem.num_layers**2 > CHAIN_TABLE_LIMIT


def solve(problem: PartitionProblem, time_limit_s: float = 10.0, upper_bound_ns: int | None = None) -> PartitionSolution | None:
    """The optimal partition of a one-chunk-per-stage pipeline: the closed-form fast path for
    identical layers, the exact chain program otherwise (tabling only the distinct head where the
    chain ends in a run of identical layers at least half its length, as an MoE model does after
    its dense layers), CP-SAT for chains too long for its tables (``time_limit_s`` is CP-SAT's
    safety net; ``upper_bound_ns``, the bottleneck of a known feasible partition, narrows the
    chain program's search)."""
    if problem.virtual_stages != 1:
        raise ValueError("solve covers one chunk per stage; interleaved pipelines use fixed_partition")
    if problem.identical_layers:
        return solve_fast(problem)
    if not uses_cpsat(problem):
        if 2 * identical_tail_start(problem) <= problem.num_layers:
            return solve_tail(problem, upper_bound_ns)  # the chain program, tabling only the distinct head
        return solve_chain(problem, upper_bound_ns)
    # Imported here: OR-Tools (and the pandas it loads) costs ~0.3 s of start-up that the fast
    # path and the chain program, which answer nearly every request, never need (bench/cli.py).
    from solver.partition.cpsat import solve_cpsat

    return solve_cpsat(problem, time_limit_s=time_limit_s)
