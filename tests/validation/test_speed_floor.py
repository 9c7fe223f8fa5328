"""The latency floor: FLOPs counted on the official model match the architecture's arithmetic; GEMM peak measured."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import TINY_ARCHS, load_benchmark, tiny_encoder
from vitdeploy.models.sam_encoder import SamEncoderArch
from vitdeploy.validation.floor import (count_flops, floor_ms, measure_gemm_peak, measure_int8_gemm_peak,
                                       onnxruntime_int8_gemm_gops)


def expected_flops(arch: SamEncoderArch) -> int:
    """GEMM/conv FLOPs of the official ImageEncoderViT, from its architecture (a multiply-add is 2 FLOPs)."""
    grid = arch.img_size // arch.patch_size
    tokens, dim, heads = grid * grid, arch.embed_dim, arch.num_heads
    hd = dim // heads
    mlp = int(dim * arch.mlp_ratio)
    flops = 2 * tokens * dim * arch.in_chans * arch.patch_size ** 2  # patch embedding
    for i in range(arch.depth):
        is_global = i in arch.global_attn_indexes or arch.window_size == 0
        side = grid if is_global else arch.window_size
        windows = 1 if is_global else (-(-grid // side)) ** 2  # padded token grid, cut into windows
        n = side * side
        rows = windows * n  # tokens attention runs on (padding included)
        flops += 2 * rows * dim * (3 * dim) + 2 * rows * dim * dim  # qkv, proj (on the padded windows)
        flops += windows * heads * (2 * n * n * hd * 2)  # q.k^T and attn.v
        flops += windows * heads * (2 * n * side * hd * 2)  # rel_h and rel_w einsums
        flops += 2 * 2 * tokens * dim * mlp  # MLP
    flops += 2 * tokens * dim * arch.out_chans + 2 * tokens * arch.out_chans * arch.out_chans * 9  # neck convs
    return flops


@pytest.mark.parametrize("name", list(TINY_ARCHS))
def test_flop_count_matches_the_architecture(name: str) -> None:
    arch = TINY_ARCHS[name]
    counted = count_flops(tiny_encoder(name), (torch.randn(1, 3, arch.img_size, arch.img_size),))
    assert counted.total == expected_flops(arch), counted.by_op
    assert set(counted.by_op) <= {"aten.convolution", "aten.addmm", "aten.bmm", "aten.mm"}


def test_full_size_vit_b_flops_are_the_known_figure() -> None:
    """ViT-B at 1024 px: ~488 GMAC (the figure quoted for SAM's image encoder), from the same arithmetic."""
    assert abs(expected_flops(SamEncoderArch()) / 2e9 - 488) < 5


def test_gemm_peak_and_floor() -> None:
    peak = measure_gemm_peak(threads=1, shapes=((256, 256, 256),), repeats=2)
    assert peak.gflops > 0 and peak.library in ("torch", "onnxruntime") and len(peak.measured) == 2
    assert floor_ms(2_000_000_000, 100.0) == pytest.approx(20.0)
    with pytest.raises(ValueError):
        floor_ms(1, 0.0)


def test_int8_gemm_rates_per_kernel_form() -> None:
    rates = onnxruntime_int8_gemm_gops(threads=1, shapes=((256, 256, 256),), repeats=2)
    assert set(rates) == {"onnxruntime u8s8 256x256x256", "onnxruntime u8u8 256x256x256"}
    assert all(rate > 0 for rate in rates.values())


def test_int8_floor_is_the_best_measured_integer_gemm() -> None:
    peak = measure_int8_gemm_peak(threads=1, shapes=((256, 256, 256),), repeats=2)
    assert set(peak.measured) == {"onnxruntime u8s8 256x256x256", "onnxruntime u8u8 256x256x256"}
    best = max(peak.measured, key=peak.measured.get)
    assert peak.gflops == peak.measured[best] > 0 and best.startswith(peak.library + " ")


def test_benchmark_header_names_each_floor() -> None:
    """The encoder benchmark's text says the FP32 floor, and the BF16 and INT8 floors where they were measured."""
    module = load_benchmark("bench_encoder_speed")
    row = {"contender": "eager", "median_ms": 100.0, "p90_ms": 110.0, "x_eager": 1.0, "first_run_s": 0.1, "load_s": 1.0,
           "x_floor": 2.0, "floor_ms": 50.0, "peak_rss_mb": 10.0, "run_peak_rss_mb": 9.0,
           "parity_vs_eager": {"cosine": 1.0, "rel_l2": 0.0, "passed": True, "tolerance": {"name": "fp32"}},
           "runs": 2, "precision": "fp32", "provider": "torch", "settings": None, "torch_in_process": True}
    header = {"recipe": "sam_tiny", "size": 64, "threads": 1, "rounds": 1, "runs": 2, "processor": "cpu",
              "load_before": "0", "load_after": "0", "steal_pct": 0.0, "bf16_gflops": None}
    flops = 4_000_000_000
    text = module.markdown([row], {"gflops": 80.0, "library": "onnxruntime"}, flops, header)
    assert "= 50 ms." in text and "BF16 floor" not in text and "INT8 floor" not in text
    header.update(bf16_gflops=400.0, int8_gops=200.0, int8_library="onnxruntime u8u8")
    text = module.markdown([row], {"gflops": 80.0, "library": "onnxruntime"}, flops, header)
    assert "BF16 floor: / 400 GFLOP/s (best BF16 GEMM here, torch) = 10 ms." in text
    assert "INT8 floor: / 200 GOP/s (best INT8 GEMM here, onnxruntime u8u8 MatMulInteger) = 20 ms." in text


def test_benchmark_contenders_cover_the_issue_rows(monkeypatch) -> None:
    module = load_benchmark("bench_encoder_speed")
    rows = module.contenders(module.TARGETS, True, True)
    names = [r["name"] for r in rows]
    assert names[0].startswith("eager") and any("torch.compile" in n for n in names) and any("naive" in n for n in names)
    assert {r.get("target") for r in rows} >= set(module.TARGETS)
    int8 = [r for r in rows if r["precision"] == "int8"]
    assert len(int8) == 1 and int8[0]["fp32_source"] in names
    # With OpenVINO and NNCF: NNCF's INT8 of the plain export, judged against the plain export; the overflow-fix
    # variant only where this CPU's u8 x s8 kernels saturate (what OpenVINO advises there).
    from vitdeploy.cpu_features import cpu_features

    rows = module.contenders(module.TARGETS, False, True, with_openvino=True, with_nncf=True)
    names = [r["name"] for r in rows]
    nncf = [r for r in rows if r["kind"] == "openvino-ir"]
    assert [r["model"] for r in nncf] == [m for m, fix in module.NNCF_MODELS.items()
                                          if fix is None or cpu_features().u8s8_saturates]
    assert all(r["precision"] == "int8" and r["fp32_source"] in names for r in nncf)
    monkeypatch.setenv("VITDEPLOY_CPU_MASK", "avx512*,amx*,avx_vnni")  # as on an AVX2-only CPU: both NNCF rows
    rows = module.contenders(module.TARGETS, False, True, with_openvino=True, with_nncf=True)
    assert [r["model"] for r in rows if r["kind"] == "openvino-ir"] == list(module.NNCF_MODELS)
    # The C++ rows: the onnxruntime-cpu file in vitdeploy's C++ backend as exported and in each CPU form written by
    # 'vitdeploy optimize' (the fused one only with the kernel library), and none without that target.
    for with_fused, forms in ((False, [None, "unfolded"]), (True, [None, "unfolded", "fused-kernel"])):
        rows = module.contenders(module.TARGETS, False, False, with_fused=with_fused, with_cpp=True)
        cpp = [r for r in rows if r["kind"] == "cpp"]
        assert [r["cpu_form"] for r in cpp] == forms
        assert [r["model"] for r in cpp] == [m for m, form in module.CPP_MODELS.items() if form in forms]
        assert cpp[0]["target"] == "onnxruntime-cpu"  # the export the forms are written from is made even if skipped
    assert not [r for r in module.contenders(("generic",), False, False, with_cpp=True) if r["kind"] == "cpp"]


def test_bf16_gemm_rate_is_measured_and_labelled() -> None:
    """The BF16 floor's rate: PyTorch ``mm`` in bfloat16 (oneDNN's AMX / AVX512-BF16 kernels where the CPU has them)."""
    from vitdeploy.validation.floor import measure_bf16_gemm_peak, torch_gemm_gflops

    rates = torch_gemm_gflops(1, shapes=((64, 96, 32),), repeats=1, dtype="bf16")
    assert list(rates) == ["torch bf16 64x96x32"] and rates["torch bf16 64x96x32"] > 0
    peak = measure_bf16_gemm_peak(1, shapes=((64, 96, 32), (32, 32, 32)), repeats=1)
    assert peak.library == "torch bf16" and peak.gflops == max(peak.measured.values())
