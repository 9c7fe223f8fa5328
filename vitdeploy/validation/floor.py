"""The hardware floor of a model's latency: its GEMM/convolution FLOPs over the machine's measured GEMM throughput.

``floor = FLOPs / peak``, where FLOPs are counted by ``torch.utils.flop_counter`` on the official
model (matrix products and convolutions; element-wise work, softmax and normalization are not
counted, so the floor is a lower bound no runtime reaches) and the peak is the best large FP32 GEMM
throughput measured here at the same thread count, by PyTorch (MKL/oneDNN) and by ONNX Runtime
(MLAS), whichever is higher. A latency is then also reported as a multiple of the floor.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from vitdeploy.runtime.backends.ort_settings import X64_QUANT_PRECISION

#: GEMM shapes (M, K, N) of the SAM ViT-B encoder at 1024 px: qkv, MLP in, MLP out, and a square one.
GEMM_SHAPES: tuple[tuple[int, int, int], ...] = ((4096, 768, 2304), (4096, 768, 3072), (4096, 3072, 768), (2048, 2048, 2048))


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one forward pass (a multiply-add counts 2), total and per operator."""

    total: int
    by_op: dict[str, int]

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class GemmPeak:
    """Best measured GEMM throughput at ``threads`` (GFLOP/s; GOP/s for integer GEMMs), per library and shape."""

    threads: int
    gflops: float
    library: str
    measured: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def count_flops(module, example_inputs: tuple) -> FlopCount:
    """FLOPs of ``module(*example_inputs)`` (no gradients) by ``torch.utils.flop_counter.FlopCounterMode``."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        module(*example_inputs)
    by_op = {str(op): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    return FlopCount(int(counter.get_total_flops()), by_op)


def _median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up (packing, allocation)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def torch_gemm_gflops(threads: int, shapes: Sequence[tuple[int, int, int]] = GEMM_SHAPES, repeats: int = 5,
                      dtype: str = "fp32") -> dict[str, float]:
    """PyTorch ``mm`` GFLOP/s per shape at ``threads`` in ``fp32`` or ``bf16`` (oneDNN's AMX / AVX512-BF16 kernels where
    the CPU has them; on other CPUs the figure shows what BF16 costs there). The thread count is restored afterwards."""
    import torch

    kind = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        out = {}
        for m, k, n in shapes:
            a, b = torch.randn(m, k).to(kind), torch.randn(k, n).to(kind)
            label = "torch" if dtype == "fp32" else f"torch {dtype}"
            out[f"{label} {m}x{k}x{n}"] = 2.0 * m * k * n / _median_seconds(lambda: torch.mm(a, b), repeats) / 1e9
        return out
    finally:
        torch.set_num_threads(before)


def onnxruntime_gemm_gflops(threads: int, shapes: Sequence[tuple[int, int, int]] = GEMM_SHAPES, repeats: int = 5) -> dict[str, float]:
    """ONNX Runtime (CPU, MLAS) FP32 MatMul GFLOP/s per shape, constant weights, at ``threads``."""
    return _onnxruntime_gemm_rates(threads, shapes, repeats, "fp32")


#: Integer GEMM forms: ONNX Runtime's default u8s8 kernels, and u8u8 (``session.x64quantprecision=1``), the
#: kernels vitdeploy picks on x86 CPUs without VNNI/AMX (vitdeploy.runtime.backends.ort_settings.int8_kernels).
INT8_GEMM_FORMS = {"u8s8": {}, "u8u8": {X64_QUANT_PRECISION: "1"}}


def onnxruntime_int8_gemm_gops(threads: int, shapes: Sequence[tuple[int, int, int]] = GEMM_SHAPES,
                               repeats: int = 5) -> dict[str, float]:
    """ONNX Runtime (CPU, MLAS) ``MatMulInteger`` GOP/s per shape and kernel form, constant int8 weights."""
    return {key: rate for form in INT8_GEMM_FORMS for key, rate in _onnxruntime_gemm_rates(threads, shapes, repeats, form).items()}


def _onnxruntime_gemm_rates(threads: int, shapes: Sequence[tuple[int, int, int]], repeats: int, form: str) -> dict[str, float]:
    """One-node ``MatMul`` (``fp32``) or ``MatMulInteger`` (an :data:`INT8_GEMM_FORMS` key) graphs, timed per shape."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    integer = form != "fp32"
    out = {}
    for m, k, n in shapes:
        if integer:
            weight = rng.integers(-64, 64, (k, n)).astype(np.int8)
            x = rng.integers(0, 256, (m, k)).astype(np.uint8)
        else:
            weight = rng.standard_normal((k, n)).astype(np.float32)
            x = rng.standard_normal((m, k)).astype(np.float32)
        op, in_type, out_type = (("MatMulInteger", TensorProto.UINT8, TensorProto.INT32) if integer
                                 else ("MatMul", TensorProto.FLOAT, TensorProto.FLOAT))
        graph = helper.make_graph([helper.make_node(op, ["x", "w"], ["y"])], "gemm",
                                  [helper.make_tensor_value_info("x", in_type, [m, k])],
                                  [helper.make_tensor_value_info("y", out_type, [m, n])],
                                  [numpy_helper.from_array(weight, "w")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
        onnx.checker.check_model(model)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        for key, value in INT8_GEMM_FORMS.get(form, {}).items():
            options.add_session_config_entry(key, value)
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        label = "onnxruntime" if form == "fp32" else f"onnxruntime {form}"
        out[f"{label} {m}x{k}x{n}"] = 2.0 * m * k * n / _median_seconds(lambda: session.run(None, {"x": x}), repeats) / 1e9
    return out


def measure_gemm_peak(threads: int, shapes: Sequence[tuple[int, int, int]] = GEMM_SHAPES, repeats: int = 5) -> GemmPeak:
    """The best FP32 GEMM throughput of PyTorch and ONNX Runtime here, at ``threads``."""
    measured = {**torch_gemm_gflops(threads, shapes, repeats), **onnxruntime_gemm_gflops(threads, shapes, repeats)}
    best = max(measured, key=measured.get)
    return GemmPeak(threads, measured[best], best.split()[0], measured)


def measure_bf16_gemm_peak(threads: int, shapes: Sequence[tuple[int, int, int]] = GEMM_SHAPES, repeats: int = 5) -> GemmPeak:
    """The best BF16 GEMM throughput of PyTorch here (the floor of a BF16 run: FLOPs over this rate)."""
    measured = torch_gemm_gflops(threads, shapes, repeats, dtype="bf16")
    best = max(measured, key=measured.get)
    return GemmPeak(threads, measured[best], "torch bf16", measured)


def measure_int8_gemm_peak(threads: int, shapes: Sequence[tuple[int, int, int]] = GEMM_SHAPES, repeats: int = 5) -> GemmPeak:
    """The best integer GEMM throughput of ONNX Runtime here (GOP/s in ``gflops``; ``library`` names the kernel form,
    ``onnxruntime u8s8`` or ``onnxruntime u8u8``): the floor of an INT8 run, its FLOPs over this rate, as if every
    multiply-add ran in INT8 at this rate (a bound: what an INT8 file keeps in float runs slower)."""
    measured = onnxruntime_int8_gemm_gops(threads, shapes, repeats)
    best = max(measured, key=measured.get)
    return GemmPeak(threads, measured[best], " ".join(best.split()[:2]), measured)


def floor_ms(flops: int, peak_gflops: float) -> float:
    """Milliseconds ``flops`` take at ``peak_gflops``."""
    if peak_gflops <= 0:
        raise ValueError("peak GFLOP/s must be positive")
    return flops / (peak_gflops * 1e9) * 1000.0


__all__ = ["GEMM_SHAPES", "INT8_GEMM_FORMS", "FlopCount", "GemmPeak", "count_flops", "floor_ms", "measure_bf16_gemm_peak",
           "measure_gemm_peak", "measure_int8_gemm_peak",
           "onnxruntime_gemm_gflops", "onnxruntime_int8_gemm_gops", "torch_gemm_gflops"]
