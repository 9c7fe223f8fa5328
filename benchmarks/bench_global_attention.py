"""What ONNX Runtime's CPU kernels can do for ONE global-attention block of SAM ViT-B at 1024 px.

The global blocks dominate the encoder (issue 7's speed work): 12 heads over 4096 tokens, head size
64, plus the decomposed rel-pos term ``rel_h[q, kh] + rel_w[q, kw]``. This benchmark times every
formulation of that attention that ONNX Runtime runs on the CPU, side by side in one process,
alternated round by round, on the same random inputs, and checks each against a float64 NumPy
reference on one head (so a fast-but-wrong form cannot hide):

  folded MHA (vitdeploy)   contrib MultiHeadAttention, rel-pos folded into q/k (head size 64+64+64=192
                           for Q.K, 64 for V): the flash path, no bias. What --target onnxruntime-cpu exports.
  vitdeploy kernel (PATH)  ai.vitdeploy::RelPosAttention (cpp/ort_ops, built by 'bash cpp/build.sh') on the
                           same folded inputs, once per vector path this CPU has (avx512, avx2), forced
                           through the node's isa attribute: what the runner swaps in with --fused-attention.
  MHA + bias               contrib MultiHeadAttention, head size 64, the rel-pos term as a materialized
                           (1, 12, 4096, 4096) attention bias (no flash path), bias construction included.
  ONNX Attention + bias    the standard opset-23 ``Attention`` op with the same float mask.
  INT8 Q.K, float P.V      Q/DQ on q/k (ORT fuses to MatMulIntegerToFloat), Softmax, float MatMul: the
                           unfused, materialized path INT8 attention would take.
  MHA without rel-pos      NOT the model's attention (no rel-pos term at all): the lower bound for any
                           exact form, shown to size what the rel-pos term costs. Not parity-checked.

Usage:
    .venv/bin/python benchmarks/bench_global_attention.py --threads 2 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HEADS, TOKENS_HW, HEAD_DIM = 12, 64, 64
TOKENS = TOKENS_HW * TOKENS_HW
SCALE = HEAD_DIM**-0.5
#: Max-abs error vs the float64 reference on head 0 (outputs are O(1) averages of unit-variance values).
FLOAT_ATOL = 1e-4
INT8_ATOL = 5e-2


def _vi(name: str, shape: list[int] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _const(name: str, values: list[int] | np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64) if isinstance(values, list) else values, name)


def _session(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], inputs: list[str], threads: int) -> ort.InferenceSession:
    shapes = {"q": [1, TOKENS, HEADS * HEAD_DIM], "k": [1, TOKENS, HEADS * HEAD_DIM], "v": [1, TOKENS, HEADS * HEAD_DIM],
              "rel_h": [1, TOKENS, HEADS, TOKENS_HW], "rel_w": [1, TOKENS, HEADS, TOKENS_HW],
              "q_aug": [1, TOKENS, HEADS * 3 * HEAD_DIM], "k_aug": [1, TOKENS, HEADS * 3 * HEAD_DIM]}
    graph = helper.make_graph(nodes, "attention", [_vi(n, shapes[n]) for n in inputs], [_vi("out", None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=10)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    if any(n.op_type == "QuantizeLinear" for n in nodes):  # the integer kernels vitdeploy's runner picks for this CPU
        from vitdeploy.runtime.backends.ort_settings import int8_kernels

        for key, value in int8_kernels().config.items():
            so.add_session_config_entry(key, value)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _bias_nodes() -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """(1, heads, N, N) additive bias rel_h[q, kh] + rel_w[q, kw] from (1, N, heads, 64) inputs."""
    nodes = [
        helper.make_node("Transpose", ["rel_h"], ["rh_t"], perm=[0, 2, 1, 3]),  # 1, heads, N, kh
        helper.make_node("Transpose", ["rel_w"], ["rw_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Unsqueeze", ["rh_t", "ax_last"], ["rh_5"]),  # 1, heads, N, kh, 1
        helper.make_node("Unsqueeze", ["rw_t", "ax_kh"], ["rw_5"]),  # 1, heads, N, 1, kw
        helper.make_node("Add", ["rh_5", "rw_5"], ["bias_5"]),
        helper.make_node("Reshape", ["bias_5", "bias_shape"], ["bias"]),
    ]
    return nodes, [_const("ax_last", [4]), _const("ax_kh", [3]), _const("bias_shape", [1, HEADS, TOKENS, TOKENS])]


def _bnsh(name: str) -> list[onnx.NodeProto]:
    return [helper.make_node("Reshape", [name, "bnsh_shape"], [f"{name}_4"]),
            helper.make_node("Transpose", [f"{name}_4"], [f"{name}_t"], perm=[0, 2, 1, 3])]


def build(threads: int, x: dict[str, np.ndarray]) -> dict[str, tuple[ort.InferenceSession, list[str], float | None]]:
    """name -> (session, input names, parity tolerance or None when the form is not the model's attention).

    ``x``: the inputs (:func:`inputs`); the INT8 form's per-tensor scales come from their ranges.
    """
    forms = {}
    mha = helper.make_node("MultiHeadAttention", ["q_aug", "k_aug", "v"], ["out"], domain="com.microsoft",
                           num_heads=HEADS, scale=1.0)
    forms["folded MHA (vitdeploy)"] = (_session([mha], [], ["q_aug", "k_aug", "v"], threads), ["q_aug", "k_aug", "v"], FLOAT_ATOL)

    nodes, inits = _bias_nodes()
    nodes.append(helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "", "bias"], ["out"], domain="com.microsoft",
                                  num_heads=HEADS, scale=SCALE))
    names = ["q", "k", "v", "rel_h", "rel_w"]
    forms["MHA + bias"] = (_session(nodes, inits, names, threads), names, FLOAT_ATOL)

    nodes, inits = _bias_nodes()
    nodes += _bnsh("q") + _bnsh("k") + _bnsh("v")
    nodes += [helper.make_node("Attention", ["q_t", "k_t", "v_t", "bias"], ["o_t"], scale=SCALE),
              helper.make_node("Transpose", ["o_t"], ["o_s"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["o_s", "out_shape"], ["out"])]
    inits += [_const("bnsh_shape", [1, TOKENS, HEADS, HEAD_DIM]), _const("out_shape", [1, TOKENS, HEADS * HEAD_DIM])]
    forms["ONNX Attention + bias"] = (_session(nodes, inits, names, threads), names, FLOAT_ATOL)

    # Unfused INT8 Q.K over the folded q/k (per-tensor symmetric scales from these inputs' ranges).
    nodes = [helper.make_node("Reshape", ["q_aug", "aug_shape"], ["qa4"]), helper.make_node("Transpose", ["qa4"], ["qa_t"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["k_aug", "aug_shape"], ["ka4"]), helper.make_node("Transpose", ["ka4"], ["ka_t"], perm=[0, 2, 3, 1]),
             helper.make_node("QuantizeLinear", ["qa_t", "q_scale", "zero"], ["qa_q"]), helper.make_node("DequantizeLinear", ["qa_q", "q_scale", "zero"], ["qa_d"]),
             helper.make_node("QuantizeLinear", ["ka_t", "k_scale", "zero"], ["ka_q"]), helper.make_node("DequantizeLinear", ["ka_q", "k_scale", "zero"], ["ka_d"]),
             helper.make_node("MatMul", ["qa_d", "ka_d"], ["scores"]), helper.make_node("Softmax", ["scores"], ["probs"], axis=-1)]
    nodes += _bnsh("v")
    nodes += [helper.make_node("MatMul", ["probs", "v_t"], ["o_t"]), helper.make_node("Transpose", ["o_t"], ["o_s"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["o_s", "out_shape"], ["out"])]
    inits = [_const("aug_shape", [1, TOKENS, HEADS, 3 * HEAD_DIM]), _const("bnsh_shape", [1, TOKENS, HEADS, HEAD_DIM]),
             _const("out_shape", [1, TOKENS, HEADS * HEAD_DIM]), numpy_helper.from_array(np.array(0, np.int8), "zero"),
             numpy_helper.from_array(np.array(np.abs(x["q_aug"]).max() / 127.0, np.float32), "q_scale"),
             numpy_helper.from_array(np.array(np.abs(x["k_aug"]).max() / 127.0, np.float32), "k_scale")]
    forms["INT8 Q.K, float P.V"] = (_session(nodes, inits, ["q_aug", "k_aug", "v"], threads), ["q_aug", "k_aug", "v"], INT8_ATOL)

    plain = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["out"], domain="com.microsoft", num_heads=HEADS, scale=SCALE)
    forms["MHA without rel-pos (lower bound, not the model)"] = (_session([plain], [], ["q", "k", "v"], threads), ["q", "k", "v"], None)
    forms.update(kernel_forms(threads))
    return forms


def kernel_forms(threads: int) -> dict[str, tuple[ort.InferenceSession, list[str], float]]:
    """vitdeploy's fused kernel on each vector path this CPU takes (none when the library is not built)."""
    from vitdeploy.runtime.forms import relpos_kernel

    library = relpos_kernel.library_path()
    if library is None:
        print(f"note: {relpos_kernel.LIBRARY_NAME} not built ('bash cpp/build.sh'): no vitdeploy kernel rows")
        return {}
    forms = {}
    for path in ("avx512", "avx2"):
        if relpos_kernel.kernel_path(TOKENS, HEAD_DIM, library, path) != path:
            continue  # this CPU lacks it
        node = helper.make_node("RelPosAttention", ["q_aug", "k_aug", "v"], ["out"], domain=relpos_kernel.DOMAIN,
                                num_heads=HEADS, grid_h=TOKENS_HW, grid_w=TOKENS_HW, isa=relpos_kernel.PATHS.index(path))
        graph = helper.make_graph([node], "kernel", [_vi(n, [1, TOKENS, HEADS * (3 if n != "v" else 1) * HEAD_DIM])
                                                     for n in ("q_aug", "k_aug", "v")], [_vi("out", None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23), helper.make_opsetid(relpos_kernel.DOMAIN, 1)],
                                  ir_version=10)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.register_custom_ops_library(str(library))
        session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        forms[f"vitdeploy kernel ({path})"] = (session, ["q_aug", "k_aug", "v"], FLOAT_ATOL)
    return forms


def inputs(seed: int) -> dict[str, np.ndarray]:
    """Random q/k/v and rel-pos terms; q_aug/k_aug are the folded form of the same attention."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((1, TOKENS, HEADS, HEAD_DIM)).astype(np.float32) for _ in range(3))
    rel_h, rel_w = (rng.standard_normal((1, TOKENS, HEADS, TOKENS_HW)).astype(np.float32) for _ in range(2))
    rows, cols = np.divmod(np.arange(TOKENS), TOKENS_HW)
    onehot = np.zeros((TOKENS, 2 * TOKENS_HW), np.float32)
    onehot[np.arange(TOKENS), rows] = 1.0
    onehot[np.arange(TOKENS), TOKENS_HW + cols] = 1.0
    q_aug = np.concatenate([q * SCALE, rel_h, rel_w], axis=-1)
    k_aug = np.concatenate([k, np.broadcast_to(onehot[None, :, None, :], (1, TOKENS, HEADS, 2 * TOKENS_HW))], axis=-1)
    flat = lambda a: np.ascontiguousarray(a.reshape(1, TOKENS, -1))  # noqa: E731
    return {"q": flat(q), "k": flat(k), "v": flat(v), "rel_h": rel_h, "rel_w": rel_w, "q_aug": flat(q_aug), "k_aug": flat(k_aug)}


def reference_head0(x: dict[str, np.ndarray]) -> np.ndarray:
    q = x["q"].reshape(TOKENS, HEADS, HEAD_DIM)[:, 0].astype(np.float64)
    k = x["k"].reshape(TOKENS, HEADS, HEAD_DIM)[:, 0].astype(np.float64)
    v = x["v"].reshape(TOKENS, HEADS, HEAD_DIM)[:, 0].astype(np.float64)
    bias = x["rel_h"][0, :, 0, :, None] + x["rel_w"][0, :, 0, None, :]  # N, kh, kw
    scores = SCALE * q @ k.T + bias.reshape(TOKENS, TOKENS)
    scores -= scores.max(axis=1, keepdims=True)
    p = np.exp(scores)
    return (p / p.sum(axis=1, keepdims=True)) @ v


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="JSON report")
    args = parser.parse_args()

    x = inputs(args.seed)
    forms = build(args.threads, x)

    ref = reference_head0(x)
    runs: dict[str, Callable[[], np.ndarray]] = {
        name: (lambda s=sess, n=names: s.run(None, {k: x[k] for k in n})[0]) for name, (sess, names, _) in forms.items()}
    parity = {}
    for name, (_, _, atol) in forms.items():
        out = runs[name]()  # also the warm-up
        err = float(np.abs(out.reshape(TOKENS, HEADS, HEAD_DIM)[:, 0] - ref).max())
        parity[name] = {"max_abs_err_head0": err, "tolerance": atol, "ok": None if atol is None else err <= atol}
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(args.rounds):
        order = list(runs)[r % len(runs):] + list(runs)[:r % len(runs)]
        for name in order:
            start = time.perf_counter()
            runs[name]()
            samples[name].append((time.perf_counter() - start) * 1000.0)
    from vitdeploy.cpu_features import cpu_features

    base = float(np.median(samples["folded MHA (vitdeploy)"]))
    cpu = cpu_features()
    print(f"one global-attention block, SAM ViT-B at 1024 px ({HEADS} heads x {TOKENS} tokens x {HEAD_DIM}), "
          f"{args.threads} threads, {args.rounds} alternated rounds, onnxruntime {ort.__version__}, {cpu.summary()}\n")
    print("| form | median ms | × folded MHA | max-abs err (head 0) | parity |\n|---|---:|---:|---:|---|")
    report = {"threads": args.threads, "rounds": args.rounds, "onnxruntime": ort.__version__, "cpu": cpu.to_dict(),
              "machine": platform.machine(), "forms": {}}
    for name, ms in samples.items():
        med = float(np.median(ms))
        p = parity[name]
        verdict = "n/a (not the model)" if p["ok"] is None else ("ok" if p["ok"] else f"FAIL (> {p['tolerance']})")
        print(f"| {name} | {med:.0f} | {med / base:.2f} | {p['max_abs_err_head0']:.2e} | {verdict} |")
        report["forms"][name] = {"median_ms": med, "samples_ms": ms, **p}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
