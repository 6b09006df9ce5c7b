"""The profiler's sub-commands of ``partitura`` (``profile``, ``compare-profile``, ``calibrate``,
``gemm-shapes``, ``import-pipedream``) as argparse declarations. Each sets ``handler`` to a callable that imports
``profiler.cli`` and calls its handler of the same name when the command runs: declaring the
commands loads nothing, so ``partitura plan`` does not pay for the profiler's imports."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any


def _handler(name: str) -> Callable[[argparse.Namespace], int]:
    """``profiler.cli.<name>``, looked up when the command runs."""

    def run(args: argparse.Namespace) -> int:
        handler: Callable[[argparse.Namespace], int] = getattr(importlib.import_module("profiler.cli"), name)
        return handler(args)

    return run


def register(subparsers: Any) -> None:
    """Add the ``profile``, ``calibrate`` and ``import-pipedream`` sub-commands. (Long but flat:
    one argparse declaration per option, read as the commands' reference.)"""
    profile = subparsers.add_parser(
        "profile", help="measure a model's per-layer profile with PyTorch (needs the profile extra)",
        description="Time forward and backward of each layer of a model on this machine and write a "
        "partitura-profile/1 document.",
    )
    profile.add_argument("--model", required=True, help="catalog model name, or a JSON file with a model spec")
    profile.add_argument("--micro-batch-size", type=int, default=1)
    profile.add_argument("--seq-length", type=int, default=None, help="default: the model's sequence length")
    profile.add_argument("--tp-size", type=int, default=1, help="measure one GPU's share of a TP group of this size")
    profile.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda when available)")
    profile.add_argument("--precision", default="bf16", choices=["bf16", "fp16"])
    profile.add_argument("--no-flash-attention", action="store_true", help="materialise attention scores")
    profile.add_argument("--warmup", type=int, default=3)
    profile.add_argument("--repeats", type=int, default=10)
    profile.add_argument("--threads", type=int, default=None, help="CPU threads for torch (CPU runs)")
    profile.add_argument(
        "--statistic", default="median", choices=["median", "min"],
        help="how repeats are summarised (min: for noisy shared hosts)",
    )
    profile.add_argument("--output", "-o", default=None, help="file to write (default: standard output)")
    profile.add_argument("--upload", default=None, metavar="URL", help="POST the profile to URL/v1/profiles")
    profile.add_argument(
        "--compare-cluster", default=None, metavar="CLUSTER",
        help="also print measured vs analytic per layer for this catalog cluster (standard error)",
    )
    profile.set_defaults(handler=_handler("run_profile"))

    compare = subparsers.add_parser(
        "compare-profile", help="measured vs analytic per layer for a profile document",
        description="Print each layer's measured and analytic forward/backward time and activation bytes.",
    )
    compare.add_argument("profile", help="a partitura-profile/1 document")
    compare.add_argument("--cluster", required=True, help="catalog cluster whose GPU the analytic model assumes")
    compare.set_defaults(handler=_handler("run_compare"))

    calibrate = subparsers.add_parser(
        "calibrate", help="measure GEMM efficiency and memory bandwidth; write a catalog override",
        description="Run a GEMM sweep and a bandwidth probe on the local device and write the gpus.json "
        "keys (gemm_efficiency, gemm_saturation_dim, hbm_efficiency) for its GPU type.",
    )
    calibrate.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda when available)")
    calibrate.add_argument("--gpu", default=None, help="catalog GPU name (default: matched from the device name)")
    calibrate.add_argument("--peak-tflops", type=float, default=None, help="dense peak, for a device not in the catalog")
    calibrate.add_argument("--hbm-gbytes-per-s", type=float, default=None, help="memory bandwidth, same case")
    calibrate.add_argument("--precision", action="append", choices=["bf16", "fp16"], default=None)
    calibrate.add_argument("--warmup", type=int, default=3)
    calibrate.add_argument("--repeats", type=int, default=10)
    calibrate.add_argument("--threads", type=int, default=None, help="CPU threads for torch (CPU runs)")
    calibrate.add_argument("--output", "-o", default=None, help="file to write (default: standard output)")
    calibrate.set_defaults(handler=_handler("run_calibrate"))

    shapes = subparsers.add_parser(
        "gemm-shapes", help="time a layer's GEMMs at a training configuration beside the cost model's times",
        description="Time the forward, input-gradient and weight-gradient GEMMs of one transformer layer's four "
        "linear layers on one TP rank (and the catalog GPU's maximum-achievable-matmul best shape) and print "
        "each beside the time the cost model charges for it.",
    )
    shapes.add_argument("--model", required=True, help="catalog model name, or a JSON file with a model spec")
    shapes.add_argument("--tp-size", type=int, default=1, help="one GPU's share of a TP group of this size")
    shapes.add_argument("--micro-batch-size", type=int, default=1)
    shapes.add_argument("--seq-length", type=int, default=None, help="default: the model's sequence length")
    shapes.add_argument("--gpu", default=None, help="catalog GPU to price as (default: matched from the device name)")
    shapes.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda when available)")
    shapes.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp8"], help="fp8: torch._scaled_mm, E4M3, per-tensor scales")
    shapes.add_argument("--warmup", type=int, default=3)
    shapes.add_argument("--repeats", type=int, default=10)
    shapes.add_argument("--threads", type=int, default=None, help="CPU threads for torch (CPU runs)")
    shapes.add_argument("--output", "-o", default=None, help="also write the timings as JSON to this file")
    shapes.set_defaults(handler=_handler("run_gemm_shapes"))

    pipedream = subparsers.add_parser(
        "import-pipedream", help="convert a PipeDream profiler graph.txt into a profile document",
        description="Group a PipeDream graph's nodes into the model's layers (embedding, transformer layers, "
        "head) and write a partitura-profile/1 document (times converted from ms to s).",
    )
    pipedream.add_argument("graph", help="PipeDream profiler output (graph.txt)")
    pipedream.add_argument("--model", required=True, help="catalog model name, or a JSON file with a model spec")
    pipedream.add_argument("--micro-batch-size", type=int, required=True, help="the batch size PipeDream profiled")
    pipedream.add_argument("--precision", required=True, choices=["bf16", "fp16", "fp8"], help="precision to plan with")
    pipedream.add_argument(
        "--nodes-per-layer", default=None,
        help="comma-separated node counts per layer in topological order (num_layers + 2 entries)",
    )
    pipedream.add_argument("--device", default="unknown (PipeDream import)", help="the GPU PipeDream ran on")
    pipedream.add_argument("--output", "-o", default=None, help="file to write (default: standard output)")
    pipedream.add_argument("--upload", default=None, metavar="URL", help="POST the profile to URL/v1/profiles")
    pipedream.set_defaults(handler=_handler("run_import_pipedream"))
