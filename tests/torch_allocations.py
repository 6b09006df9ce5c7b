"""Live bytes read off PyTorch's allocator on the CPU build of torch, for the memory tests that
check a byte count against PyTorch itself (tests/test_memory_backward.py,
tests/test_memory_loss_parallel.py). The profiler records every allocation and free it sees
(``profile_memory``); the peak of their running sum is what the profiled code held at most above
what was alive when it started. Importing this module skips the importing test module where
torch is not installed.

The profiled code runs with oneDNN off (``torch.backends.mkldnn.flags(enabled=False)``): on CPUs
with AVX-512 bf16, oneDNN's bf16 GEMMs allocate scratch buffers through the same allocator (165,504
bytes more in a 2048 x 1024 x 128 backward GEMM on an AVX-512 EPYC, none on AVX2), so the figure
would depend on the machine; ATen's own CPU GEMM allocates only its output tensors, which are what
the tests count (a GPU's cuBLAS workspace is not one of them either: PyTorch sets it aside once)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
profiler = pytest.importorskip("torch.profiler")
_EventType = pytest.importorskip("torch._C._profiler")._EventType


def profiled(fn: Callable[[], Any]) -> tuple[Any, Any]:
    """``fn()`` under the CPU profiler with memory events: (the profile, fn's result)."""
    with warnings.catch_warnings():
        # mkldnn.flags also sets oneDNN's TF32 switch, which warns on builds without Intel GPUs.
        warnings.filterwarnings("ignore", message="TF32 acceleration on top of oneDNN")
        with torch.backends.mkldnn.flags(enabled=False):
            with profiler.profile(activities=[profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
                result = fn()
    return prof, result


def peak_live_bytes(prof: Any) -> int:
    """The peak of the live bytes over a profile's allocation events (frees are negative sizes)."""
    events, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        if event.typed[0] == _EventType.Allocation:
            events.append((event.start_time_ns, event.typed[1].alloc_size))
        stack.extend(event.children)
    live = peak = 0
    for _, size in sorted(events):
        live += size
        peak = max(peak, live)
    return peak
