"""``partitura gemm-shapes``: a layer's forward, input-gradient and weight-gradient GEMMs at a
training configuration's shapes, timed on the local device (CPU here) beside the cost model's time
for each, and the catalog GPU's maximum-achievable-matmul best shape."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

import catalog  # noqa: E402
from profiler.cli import main  # noqa: E402
from profiler.gemm_shapes import GemmShape, layer_gemm_shapes, mamf_shapes, time_gemms, timings_table  # noqa: E402
from solver.cost.analytic import BACKWARD_TO_FORWARD  # noqa: E402
from solver.cost.compute import gemm_time_s  # noqa: E402
from solver.spec.errors import SpecError  # noqa: E402
from solver.spec.model import ModelSpec  # noqa: E402
from solver.spec.training import Precision  # noqa: E402

TINY = ModelSpec("tiny-gemm", num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=128, seq_length=32)


def test_the_shapes_are_the_layers_linear_gemms_on_one_tp_rank():
    """Llama 3 70B at tp 8, 8,192 tokens: fused QKV 8192 -> (8192 + 2 x 1024) / 8 = 1280, the
    output projection 1024 -> 8192, SwiGLU's up and gate 8192 -> 2 x 28672 / 8 = 7168, down
    3584 -> 8192; each forward (m x k @ k x n), input gradient (m x n @ n x k) and weight
    gradient (n x m @ m x k), the backward ones priced as the forward."""
    shapes = {s.name: s for s in layer_gemm_shapes(catalog.get_model("llama3-70b"), 8, 8192)}
    assert len(shapes) == 12
    forward = {name: (shapes[f"{name}.forward"].n, shapes[f"{name}.forward"].k) for name in ("qkv", "out_proj", "mlp_up", "mlp_down")}
    assert forward == {"qkv": (1280, 8192), "out_proj": (8192, 1024), "mlp_up": (7168, 8192), "mlp_down": (8192, 3584)}
    for name, (n, k) in forward.items():
        assert (shapes[f"{name}.forward"].m, shapes[f"{name}.dgrad"].m, shapes[f"{name}.wgrad"].m) == (8192, 8192, n)
        assert (shapes[f"{name}.dgrad"].n, shapes[f"{name}.dgrad"].k) == (k, n)
        assert (shapes[f"{name}.wgrad"].n, shapes[f"{name}.wgrad"].k) == (k, 8192)
        for kind in ("forward", "dgrad", "wgrad"):
            assert shapes[f"{name}.{kind}"].priced == (8192, n, k)
    with pytest.raises(SpecError):
        layer_gemm_shapes(TINY, 0, 8)


def test_timings_carry_the_cost_models_time_for_what_each_gemm_prices():
    gpu = catalog.get_gpu("v100-sxm2-32gb")
    shapes = layer_gemm_shapes(TINY, 2, 32)
    timings = time_gemms(shapes, gpu, Precision.FP16, "cpu", warmup=0, repeats=1)
    assert [t.name for t in timings] == [s.name for s in shapes]
    for timing, shape in zip(timings, shapes, strict=True):
        assert timing.measured_s > 0
        assert timing.model_s == gemm_time_s(gpu, Precision.FP16, *shape.priced)
        assert timing.ratio == timing.measured_s / timing.model_s
        assert timing.measured_tflops == pytest.approx(2 * shape.m * shape.n * shape.k / timing.measured_s / 1e12)
    # The model's layer: each forward once and BACKWARD_TO_FORWARD times again for its backward.
    forward = sum(t.model_s for t in timings if t.name.endswith(".forward"))
    assert sum(t.model_s for t in timings) == pytest.approx((1 + BACKWARD_TO_FORWARD) * forward)
    assert "layer's linear GEMMs" in timings_table(timings)
    with pytest.raises(SpecError):
        time_gemms(shapes, gpu, Precision.BF16, "cpu", warmup=0, repeats=1)  # V100 has no bf16 peak


def test_the_mamf_best_shape_comes_from_the_bench_data(tmp_path):
    (h100,) = mamf_shapes("h100-sxm5-80gb", Precision.BF16)
    assert (h100.m, h100.n, h100.k) == (2048, 2048, 13312) and h100.name == "mamf.794.5"
    assert mamf_shapes("v100-sxm2-32gb", Precision.FP16) == []
    assert mamf_shapes("h100-sxm5-80gb", Precision.BF16, tmp_path / "absent.json") == []
    assert isinstance(h100, GemmShape)


def test_the_command_prints_and_writes_the_timings(tmp_path, capsys):
    spec = tmp_path / "model.json"
    spec.write_text(json.dumps({"name": "tiny-gemm", "num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                "vocab_size": 128, "seq_length": 32}))
    out = tmp_path / "gemms.json"
    argv = ["gemm-shapes", "--model", str(spec), "--tp-size", "2", "--gpu", "v100-sxm2-32gb", "--precision", "fp16",
            "--device", "cpu", "--threads", "1", "--warmup", "0", "--repeats", "1", "--output", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].split()[:4] == ["gemm", "m", "n", "k"] and "qkv.wgrad" in printed
    document = json.loads(out.read_text())
    assert document["gpu"] == "v100-sxm2-32gb" and document["tp_size"] == 2 and document["seq_length"] == 32
    assert len(document["gemms"]) == 12 and all(g["measured_s"] > 0 and g["model_s"] > 0 for g in document["gemms"])


def test_the_command_names_what_is_wrong(capsys):
    assert main(["gemm-shapes", "--model", "llama3-8b", "--device", "cpu"]) == 2
    assert "gpu: a CPU has no catalog entry" in capsys.readouterr().err
    assert main(["gemm-shapes", "--model", "no-such-model", "--gpu", "h100-sxm5-80gb", "--device", "cpu"]) == 2
    assert "model: unknown model" in capsys.readouterr().err


def test_fp8_gemms_run_through_scaled_mm_with_aligned_shapes():
    """FP8: torch._scaled_mm on E4M3 operands (the second column-major), priced at the GPU's FP8
    peak and one byte per operand element; cuBLASLt needs every dimension a multiple of 16."""
    gpu = catalog.get_gpu("h100-sxm5-80gb")
    shapes = layer_gemm_shapes(TINY, 1, 32)  # hidden 64, FFN 256: every dimension a multiple of 16
    timings = time_gemms(shapes, gpu, Precision.FP8, "cpu", warmup=0, repeats=1)
    assert all(t.measured_s > 0 for t in timings)
    assert [t.model_s for t in timings] == [gemm_time_s(gpu, Precision.FP8, *s.priced) for s in shapes]
    with pytest.raises(SpecError) as error:
        time_gemms([GemmShape("odd", 16, 24, 32, (16, 24, 32))], gpu, Precision.FP8, "cpu", warmup=0, repeats=1)
    assert error.value.field == "shape" and "multiple of 16" in error.value.reason
    with pytest.raises(SpecError) as error:
        time_gemms(shapes, catalog.get_gpu("v100-sxm2-32gb"), Precision.FP8, "cpu", warmup=0, repeats=1)
    assert error.value.field == "precision"
