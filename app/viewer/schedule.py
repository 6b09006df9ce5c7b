"""Where each micro-batch's forward and backward pass sits in one step's pipeline schedule, for
the timeline of the plan page.

The cost model counts a step's pipeline as ``solver.cost.schedule.pipeline_slots`` slots of the
slowest stage's time per micro-batch: every stage runs at the pace of the slowest, 1F1B takes
m + p - 1 slots, interleaved 1F1B with v chunks per stage m + (p - 1)/v (Narayanan et al. 2021,
Sec 2.2). This module lays out that schedule operation by operation, in the order Megatron-LM
runs it (``forward_backward_pipelining_without_interleaving`` and ``..._with_interleaving``:
warm-up forwards, one forward one backward, cool-down backwards), every chunk pass taking its
share of a slot, so the drawing takes exactly the slots the cost model counts. The warm-up is
the one ``solver.cost.memory.in_flight_micro_batches`` counts, (p - i - 1)*2 + (v - 1)*p chunk
forwards on stage i (Megatron-LM runs every forward first when m == p; the cost model does not,
and neither does this drawing), so each stage holds as many micro-batches as its memory bar.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Pass(str, Enum):
    FORWARD = "forward"
    BACKWARD = "backward"


@dataclass(frozen=True)
class ChunkPass:
    """One pass of one micro-batch through one chunk (model part) of one stage."""

    stage: int
    micro_batch: int
    chunk: int  # 0 .. virtual_stages - 1: which of the stage's model parts
    kind: Pass
    start_slot: float  # in slots of the slowest stage's time per micro-batch
    length_slot: float


@dataclass(frozen=True)
class Schedule:
    pp_size: int
    virtual_stages: int
    num_micro_batches: int
    passes: tuple[ChunkPass, ...]

    @property
    def total_slots(self) -> float:
        return max(p.start_slot + p.length_slot for p in self.passes)

    def idle_slots(self, stage: int) -> float:
        """Slots within the step in which ``stage`` runs nothing (its bubble)."""
        return self.total_slots - sum(p.length_slot for p in self.passes if p.stage == stage)


def _order(stage: int, pp_size: int, virtual_stages: int, num_micro_batches: int) -> list[tuple[Pass, int, int]]:
    """The (pass, micro-batch, chunk) operations of ``stage`` in the order it runs them."""
    p, v, m = pp_size, virtual_stages, num_micro_batches
    total = m * v

    def chunk_op(k: int, kind: Pass) -> tuple[Pass, int, int]:
        # Interleaved: micro-batches go in groups of p through chunk 0, then chunk 1, ...;
        # backward visits the chunks in reverse.
        group, within = divmod(k, p * v)
        chunk = within // p if kind is Pass.FORWARD else v - 1 - within // p
        return kind, group * p + within % p, chunk

    if v == 1:
        warmup = min(p - stage - 1, m)
    else:
        warmup = min((p - stage - 1) * 2 + (v - 1) * p, total)
    ops = [chunk_op(k, Pass.FORWARD) for k in range(warmup)]
    forward_next, backward_next = warmup, 0
    while forward_next < total:
        ops.append(chunk_op(forward_next, Pass.FORWARD))
        ops.append(chunk_op(backward_next, Pass.BACKWARD))
        forward_next += 1
        backward_next += 1
    ops += [chunk_op(k, Pass.BACKWARD) for k in range(backward_next, total)]
    return ops


def pipeline_schedule(pp_size: int, virtual_stages: int, num_micro_batches: int, forward_share: float) -> Schedule:
    """Every chunk pass of one step, placed as early as its stage and its inputs allow.

    ``forward_share``: the part of a micro-batch's slot its forward passes take (the rest is
    backward); each of the v chunks takes 1/v of either. A forward needs the same micro-batch's
    forward on the previous stage (or, on stage 0, the previous chunk's on the last stage); a
    backward needs the next stage's (or the next chunk's on stage 0; the last chunk's own forward
    on the last stage)."""
    p, v, m = pp_size, virtual_stages, num_micro_batches
    if not (0 < forward_share < 1) or p < 1 or v < 1 or m < 1:
        raise ValueError("a schedule needs p, v, m >= 1 and a forward share between 0 and 1")
    length = {Pass.FORWARD: forward_share / v, Pass.BACKWARD: (1 - forward_share) / v}
    orders = [_order(stage, p, v, m) for stage in range(p)]
    done: dict[tuple[Pass, int, int, int], float] = {}  # (pass, micro-batch, chunk, stage) -> end slot
    next_op = [0] * p
    stage_free = [0.0] * p
    passes: list[ChunkPass] = []

    def needs(kind: Pass, micro_batch: int, chunk: int, stage: int) -> tuple[Pass, int, int, int] | None:
        if kind is Pass.FORWARD:
            if stage > 0:
                return kind, micro_batch, chunk, stage - 1
            return (kind, micro_batch, chunk - 1, p - 1) if chunk > 0 else None
        if stage < p - 1:
            return kind, micro_batch, chunk, stage + 1
        if chunk < v - 1:
            return kind, micro_batch, chunk + 1, 0
        return Pass.FORWARD, micro_batch, chunk, stage

    progressed = True
    while progressed:
        progressed = False
        for stage in range(p):
            while next_op[stage] < len(orders[stage]):
                kind, micro_batch, chunk = orders[stage][next_op[stage]]
                dependency = needs(kind, micro_batch, chunk, stage)
                if dependency is not None and dependency not in done:
                    break
                start = max(stage_free[stage], done[dependency] if dependency is not None else 0.0)
                end = start + length[kind]
                done[kind, micro_batch, chunk, stage] = end
                stage_free[stage] = end
                passes.append(ChunkPass(stage, micro_batch, chunk, kind, start, length[kind]))
                next_op[stage] += 1
                progressed = True
    if any(next_op[stage] < len(orders[stage]) for stage in range(p)):
        raise ValueError(f"the schedule for p={p}, v={v}, m={m} deadlocks")  # a bug in _order, never an input
    return Schedule(p, v, m, tuple(passes))
