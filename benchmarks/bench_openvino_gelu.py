"""OpenVINO's GELU form (vitdeploy/runtime/forms/openvino_gelu.py), kept apart against fused: alternated pairs in one process.

Why in one process: on the shared 2-core machines this project runs on, whole-process timings of SAM ViT-B swing by
about 10 % between runs, the size of the effect. Here both compiled models live side by side and are run in turns
(the order flips every pair), so each pair sees the same machine; the ratio of each pair is reported.

What it times: for each ``--layer TOKENS,IN,OUT``, one ``MatMul`` + bias + the exported erf GELU (the MLP's first
layer); for each ``--model`` (an FP32 ONNX file with one input, e.g. ``vitdeploy export``'s ``generic`` file), the
whole model on ``--input`` (a .npy; default seeded noise of the model's input shape). Both readings are compiled as
vitdeploy's OpenVINO runner compiles (``cpu_config``: f32 pinned, LATENCY, ``--threads``).

Usage (the figures in docs/runtimes-and-cpus.md, AMD EPYC Zen 3, 2 threads):
    .venv/bin/python benchmarks/bench_openvino_gelu.py --layer 4096,768,3072 --layer 197,768,3072 \\
        --layer 197,384,1536 --layer 3136,96,384 --pairs 30
    .venv/bin/python benchmarks/bench_openvino_gelu.py --model out/speed_zen3/vitdeploy_generic.onnx \\
        --input out/speed_zen3/input.npy --pairs 8
    # the file 'vitdeploy optimize --runtime openvino' wrote against the plain export, as a stock OpenVINO reads them
    .venv/bin/python benchmarks/bench_openvino_gelu.py --stock out/speed_zen3/vitdeploy_generic.openvino.onnx \\
        out/speed_zen3/naive.onnx --input out/speed_zen3/input.npy --pairs 8
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def layer_model(tokens: int, cin: int, cout: int, path: Path) -> None:
    """``x @ W + b`` then GELU as torch.onnx exports ``nn.GELU()`` (``0.5 * (1 + erf(y / sqrt(2))) * y``)."""
    import onnx
    from onnx import TensorProto, helper
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    inits = [nh.from_array(rng.standard_normal((cin, cout), dtype=np.float32) * 0.05, "W"),
             nh.from_array(rng.standard_normal(cout, dtype=np.float32) * 0.1, "b"),
             nh.from_array(np.array(np.sqrt(2), np.float32), "sqrt2"), nh.from_array(np.array(1, np.float32), "one"),
             nh.from_array(np.array(0.5, np.float32), "half")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["y"]),
             helper.make_node("Div", ["y", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["half", "a"], ["h"]),
             helper.make_node("Mul", ["y", "h"], ["out"])]
    graph = helper.make_graph(nodes, "mlp_fc1_gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, tokens, cin])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, tokens, cout])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, str(path))


def pairs_of(first: Any, second: Any, x: np.ndarray | None, pairs: int, repeat: int,
             names: tuple[str, str] = ("apart", "fused")) -> str:
    """Time two infer requests (``first`` / ``second``) in alternated pairs on ``x`` (default: seeded noise of the input
    shape); one line: each one's median ms and the per-pair ratio first / second."""
    if x is None:
        shape = [d.get_length() for d in second.model_inputs[0].get_partial_shape()]
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    for request in (second, first):
        request.infer({0: x})  # first-run allocations and JIT
    times: dict[str, list[float]] = {"first": [], "second": []}
    for i in range(pairs):
        order = (("second", second), ("first", first)) if i % 2 == 0 else (("first", first), ("second", second))
        for name, request in order:
            start = time.perf_counter()
            for _ in range(repeat):
                request.infer({0: x})
            times[name].append((time.perf_counter() - start) / repeat * 1e3)
    ratios = np.array(times["first"]) / np.array(times["second"])
    return (f"{names[0]} {np.median(times['first']):.1f} ms, {names[1]} {np.median(times['second']):.1f} ms (medians); "
            f"{names[0]} / {names[1]} per pair: median {np.median(ratios):.3f}, min {ratios.min():.3f}, "
            f"max {ratios.max():.3f}, {int((ratios < 1).sum())} of {pairs} below 1")


def alternate(path: Path, x: np.ndarray | None, pairs: int, threads: int, repeat: int) -> str:
    """One line: the GELUs kept apart, each reading's median ms and the per-pair ratio apart / fused."""
    import openvino as ov

    from vitdeploy.runtime.backends.openvino_runner import cpu_config
    from vitdeploy.runtime.forms.openvino_gelu import gelu_apart_from_gemms

    core = ov.Core()

    def compiled(apart: bool):
        model = core.read_model(str(path))
        count = gelu_apart_from_gemms(model) if apart else 0
        request = core.compile_model(model, "CPU", cpu_config(threads, "f32")).create_infer_request()
        return request, count

    (fused, _), (apart, count) = compiled(False), compiled(True)
    return f"{count} GELU(s) apart; {pairs_of(apart, fused, x, pairs, repeat)}"


def stock(first: Path, second: Path, x: np.ndarray | None, pairs: int, threads: int) -> str:
    """Two files as an application's own OpenVINO runs them (``Core.read_model``, ``compile_model`` at the plugin's
    defaults but ``--threads``; no vitdeploy form at load), alternated; one line with the ratio first / second."""
    import openvino as ov

    core = ov.Core()
    first_request, second_request = (
        core.compile_model(core.read_model(str(f)), "CPU", {"INFERENCE_NUM_THREADS": threads}).create_infer_request()
        for f in (first, second))
    return pairs_of(first_request, second_request, x, pairs, 1, (first.name, second.name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layer", action="append", default=[], help="TOKENS,IN,OUT of one MLP layer (repeatable)")
    parser.add_argument("--model", action="append", default=[], help="an FP32 ONNX file with one input (repeatable)")
    parser.add_argument("--stock", nargs=2, metavar=("FIRST", "SECOND"),
                        help="two ONNX files run as an application's own OpenVINO runs them (e.g. the file 'vitdeploy "
                             "optimize --runtime openvino' wrote, and the plain export)")
    parser.add_argument("--input", help="the model input (.npy); default: seeded noise")
    parser.add_argument("--pairs", type=int, default=20, help="alternated pairs")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if not args.layer and not args.model and not args.stock:
        parser.error("give --layer TOKENS,IN,OUT, --model FILE or --stock FIRST SECOND")
    from vitdeploy.cpu_features import cpu_features
    from vitdeploy.runtime.backends.openvino_runner import openvino_version

    print(f"CPU: {cpu_features().summary()}; OpenVINO {openvino_version()}; {args.threads} thread(s)")
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.layer:
            tokens, cin, cout = (int(v) for v in spec.split(","))
            path = Path(tmp) / f"layer_{tokens}_{cin}_{cout}.onnx"
            layer_model(tokens, cin, cout, path)
            print(f"layer {tokens} tokens, {cin} -> {cout}: {alternate(path, None, args.pairs, args.threads, repeat=5)}")
    x = np.load(args.input) if args.input else None
    for model in args.model:
        print(f"{model}: {alternate(Path(model), x, args.pairs, args.threads, repeat=1)}")
    if args.stock:
        first, second = (Path(f) for f in args.stock)
        print(f"as an application's own OpenVINO runs them: {stock(first, second, x, args.pairs, args.threads)}")


if __name__ == "__main__":
    main()
