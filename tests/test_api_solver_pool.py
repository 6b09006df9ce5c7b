"""The solver pool's bounds: refusal when saturated, and a search that overruns is stopped."""

from __future__ import annotations

import time

import pytest

from app.core.solver_pool import SolverPool, SolverSaturated, SolverUnavailable


def test_saturation_refuses_at_once_and_frees_its_slots():
    pool = SolverPool(workers=1, queue_depth=1, retry_after_s=3)
    try:
        with pool.reserved(2):
            assert pool.in_use == 2
            with pytest.raises(SolverSaturated) as refused:
                pool.run(abs, -3, timeout_s=60)
            assert refused.value.retry_after_s == 3
        assert pool.in_use == 0
        assert pool.run(abs, -3, timeout_s=60) == 3
    finally:
        pool.shutdown()


def test_a_call_past_its_deadline_is_stopped_and_the_pool_recovers():
    pool = SolverPool(workers=1, queue_depth=0, retry_after_s=3)
    try:
        assert pool.run(abs, -1, timeout_s=60) == 1  # the worker is up
        with pytest.raises(SolverUnavailable):
            pool.run(time.sleep, 600, timeout_s=0.5)
        # The overrunning worker was terminated: its slot comes back and new work runs.
        for _ in range(600):
            if pool.in_use == 0:
                break
            time.sleep(0.1)
        assert pool.in_use == 0
        assert pool.run(abs, -7, timeout_s=60) == 7
    finally:
        pool.shutdown()
