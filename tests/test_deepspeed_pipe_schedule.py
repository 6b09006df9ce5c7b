"""DeepSpeed's pipeline engine costs as 1F1B (the megatron-deepspeed-2022 stack's pipeline).

The model times every non-interleaved pipeline as 1F1B: (m + p - 1) slots of the slowest stage's
forward + backward (``solver.cost.schedule.pipeline_time_s``). DeepSpeed's ``TrainSchedule``
(deepspeed/runtime/pipe/schedule.py, from the pipeline engine's first version, 65c2f974d, 2020-09)
is written differently: 2 (m + p - 1) steps, in each of which a stage runs one forward or one
backward, chosen by the parity of the step and of the stage, with its p2p commands before the
compute: a forward step receives the micro-batch's activation and sends the previous backward's
gradient, a backward step sends the previous forward's activation and receives the micro-batch's
gradient (b528f50e3, 2023-03, DeepSpeed v0.9, puts each step's two commands the other way round).
Its sends and receives pair up in rank order (a receive waits for the matching send).

This file replays that schedule (its step-to-micro-batch rule as DeepSpeed documents it, in this
project's own code) with free transfers and checks it takes exactly 1F1B's time for any forward
and backward times, so the stack's pipeline needs no schedule term of its own; and that a blocking
transfer of c seconds adds at most 4c per slot (docs/wip/README.md, session 14 leads)."""

from __future__ import annotations

import itertools

import pytest

from solver.cost.schedule import pipeline_time_s


def _micro_batch(step: int, stage: int, stages: int) -> tuple[int, bool]:
    """The micro-batch a stage works on at a step of TrainSchedule, and whether it is a forward:
    forwards on the steps of the stage's own parity, backwards on the others, each stage about
    half a step per stage behind the one before it (out of range: an idle step)."""
    half = step // 2 if step % 2 == 0 else (step - 1) // 2
    if step % 2 == stage % 2:
        return half - stage // 2, True
    if step % 2 == 0:
        return half - stages + (stage + 1) // 2, False
    return half - stages + 1 + stage // 2, False


def _program(stage: int, stages: int, micro_batches: int, sends_first: bool = False) -> list[tuple[str, int, int]]:
    """One stage's commands in order: (kind, peer stage or -1, micro-batch); ``sends_first``:
    v0.9's order of each step's two p2p commands."""
    valid = range(micro_batches)
    commands: list[tuple[str, int, int]] = []
    previous = -1
    for step in range(2 * (micro_batches + stages - 1)):
        micro_batch, forward = _micro_batch(step, stage, stages)
        exchange: list[tuple[str, int, int]] = []
        if forward and stage > 0:
            exchange += [("recv_activation", stage - 1, micro_batch)] if micro_batch in valid else []
            exchange += [("send_gradient", stage - 1, previous)] if previous in valid else []
        if not forward and stage < stages - 1:
            exchange += [("send_activation", stage + 1, previous)] if previous in valid else []
            exchange += [("recv_gradient", stage + 1, micro_batch)] if micro_batch in valid else []
        commands += exchange[::-1] if sends_first else exchange
        if micro_batch in valid:
            commands.append(("forward" if forward else "backward", -1, micro_batch))
        previous = micro_batch
    return commands


MATCH = {"send_activation": "recv_activation", "recv_activation": "send_activation",
         "send_gradient": "recv_gradient", "recv_gradient": "send_gradient"}


def replay(
    stages: int, micro_batches: int, forward_s: float, backward_s: float, transfer_s: float = 0.0, sends_first: bool = False
) -> float:
    """Seconds of one step: each stage runs its commands in order; a transfer starts when both
    of its stages have reached it and ends transfer_s later for both."""
    programs = [_program(stage, stages, micro_batches, sends_first) for stage in range(stages)]
    position, clock = [0] * stages, [0.0] * stages
    moved = True
    while moved:
        moved = False
        for stage in range(stages):
            while position[stage] < len(programs[stage]):
                kind, peer, micro_batch = programs[stage][position[stage]]
                if kind in ("forward", "backward"):
                    clock[stage] += forward_s if kind == "forward" else backward_s
                elif position[peer] < len(programs[peer]) and programs[peer][position[peer]] == (MATCH[kind], stage, micro_batch):
                    clock[stage] = clock[peer] = max(clock[stage], clock[peer]) + transfer_s
                    position[peer] += 1
                else:
                    break
                position[stage] += 1
                moved = True
    assert position == [len(program) for program in programs], "the schedule deadlocked"
    return max(clock)


def test_every_stage_runs_each_micro_batch_forward_then_backward_once():
    for stages, micro_batches in ((4, 8), (5, 3), (12, 32)):
        for stage in range(stages):
            computed = [(kind, mb) for kind, _, mb in _program(stage, stages, micro_batches) if kind in ("forward", "backward")]
            assert sorted(computed) == sorted(itertools.product(("backward", "forward"), range(micro_batches)))
            assert all(computed.index(("forward", mb)) < computed.index(("backward", mb)) for mb in range(micro_batches))


@pytest.mark.parametrize(("stages", "micro_batches"), [(2, 2), (4, 8), (4, 32), (12, 32), (35, 192), (6, 4)])
@pytest.mark.parametrize(("forward_s", "backward_s"), [(1.0, 2.0), (1.0, 3.0), (2.0, 1.0)])
@pytest.mark.parametrize("sends_first", [False, True])
def test_with_free_transfers_the_engine_takes_exactly_1f1b_time(stages, micro_batches, forward_s, backward_s, sends_first):
    busy_s, bubble_s = pipeline_time_s(forward_s + backward_s, stages, 1, micro_batches)
    assert replay(stages, micro_batches, forward_s, backward_s, sends_first=sends_first) == pytest.approx(busy_s + bubble_s)


@pytest.mark.parametrize(("stages", "micro_batches"), [(4, 32), (35, 192)])
def test_a_blocking_transfer_adds_at_most_four_transfers_per_slot(stages, micro_batches):
    """Against the two per micro-batch slot the model charges (``pipeline_comm_s``)."""
    slots = micro_batches + stages - 1
    free = replay(stages, micro_batches, 1.0, 3.0)
    blocking = replay(stages, micro_batches, 1.0, 3.0, transfer_s=0.05)
    assert 2 * 0.05 * slots < blocking - free <= 4 * 0.05 * slots
