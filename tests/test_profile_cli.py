"""``partitura profile`` / ``partitura calibrate`` on CPU: files, upload, catalog override."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

torch = pytest.importorskip("torch")

from profiler.calibrate import SATURATION_GRID, GemmSample, fit_gemm_model  # noqa: E402
from profiler.cli import main, match_catalog_gpu  # noqa: E402
from solver.cost.compute import gemm_time_s
from solver.io.profile_format import parse_profile_document
from solver.spec.hardware import GpuSpec
from solver.spec.training import Precision

SPEC = {
    "name": "tiny-cli", "num_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "vocab_size": 128,
    "seq_length": 32,
}
FAST = ["--device", "cpu", "--threads", "1", "--warmup", "1", "--repeats", "2", "--micro-batch-size", "2"]


def test_profile_command_writes_a_valid_document(tmp_path):
    spec = tmp_path / "model.json"
    spec.write_text(json.dumps(SPEC))
    out = tmp_path / "profile.json"
    assert main(["profile", "--model", str(spec), *FAST, "--output", str(out)]) == 0
    doc = parse_profile_document(json.loads(out.read_text()))
    assert doc.model.name == "tiny-cli"
    assert doc.profile.micro_batch_size == 2 and doc.profile.seq_length == 32
    assert len(doc.profile.transformer_layers) == 2


def test_profile_command_reports_bad_input(tmp_path, capsys):
    assert main(["profile", "--model", "no-such-model", "--device", "cpu"]) == 2
    assert "model: unknown model" in capsys.readouterr().err
    spec = tmp_path / "model.json"
    spec.write_text(json.dumps({**SPEC, "hidden_size": 63}))
    assert main(["profile", "--model", str(spec), "--device", "cpu"]) == 2
    assert "model.hidden_size" in capsys.readouterr().err


class _Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, dict]] = []

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Collector.received.append((self.path, body))
        reply = json.dumps({"id": "prof-1"}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):  # keep test output quiet
        pass


def test_profile_command_uploads_to_v1_profiles(tmp_path, capsys):
    server = HTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        spec = tmp_path / "model.json"
        spec.write_text(json.dumps(SPEC))
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        status = main(["profile", "--model", str(spec), *FAST, "--output", str(tmp_path / "p.json"), "--upload", url])
    finally:
        server.shutdown()
        server.server_close()
    assert status == 0
    path, body = _Collector.received[-1]
    assert path == "/v1/profiles"
    assert body["format"] == "partitura-profile/1" and body["model"]["name"] == "tiny-cli"
    assert "profile id prof-1" in capsys.readouterr().err


def test_gemm_fit_recovers_the_knobs_it_was_generated_with():
    gpu = GpuSpec(
        name="synthetic", peak_flops_per_s={"bf16": 100e12}, memory_bytes=2**34, hbm_bytes_per_s=2e12,
        gemm_efficiency={"bf16": 0.5}, hbm_efficiency=0.8,
    )
    truth = GpuSpec(**{**gpu.__dict__, "gemm_efficiency": {Precision.BF16: 0.7}, "gemm_saturation_dim": float(SATURATION_GRID[60])})
    shapes = [(d, d, d) for d in (256, 512, 1024, 4096)] + [(m, 4096, 4096) for m in (16, 64, 256)]
    samples = [GemmSample(m, n, k, gemm_time_s(truth, Precision.BF16, m, n, k)) for m, n, k in shapes]
    efficiency, saturation, error = fit_gemm_model(gpu, Precision.BF16, samples)
    assert efficiency == pytest.approx(0.7)
    assert saturation == pytest.approx(truth.gemm_saturation_dim)
    assert error == pytest.approx(0.0, abs=1e-9)


def test_calibrate_command_writes_a_catalog_override(tmp_path):
    out = tmp_path / "override.json"
    # A CPU has no catalog entry: state its peak and bandwidth generously so fractions stay in (0, 1].
    status = main([
        "calibrate", "--device", "cpu", "--threads", "1", "--peak-tflops", "50", "--hbm-gbytes-per-s", "2000",
        "--warmup", "1", "--repeats", "3", "--gpu", "this-cpu", "--output", str(out),
    ])
    assert status == 0
    override = json.loads(out.read_text())
    (entry,) = override["gpus"]
    assert entry["name"] == "this-cpu"
    assert set(entry) >= {"gemm_efficiency", "gemm_saturation_dim", "hbm_efficiency", "sources"}
    assert 0 < entry["gemm_efficiency"]["bf16"] <= 1
    assert SATURATION_GRID[0] <= entry["gemm_saturation_dim"] <= SATURATION_GRID[-1]
    assert 0 < entry["hbm_efficiency"] <= 1
    assert entry["measured"]["stream_gbytes_per_s"] > 0
    assert all(s["seconds"] > 0 for s in entry["measured"]["gemms"]["bf16"])


def test_catalog_gpu_is_matched_from_the_device_name():
    assert match_catalog_gpu("NVIDIA H100 80GB HBM3", 79.6) == "h100-sxm5-80gb"
    assert match_catalog_gpu("NVIDIA A100-SXM4-40GB", 39.4) == "a100-sxm4-40gb"
    assert match_catalog_gpu("NVIDIA A100-SXM4-80GB", 79.2) == "a100-sxm4-80gb"
    assert match_catalog_gpu("NVIDIA H200", 139.8) == "h200-sxm-141gb"
