"""The fused rel-pos attention kernel on the machine this runs on (scripts/arm-check.sh runs it on arm64 under qemu):
every path the library may be asked for, on every shape of tests/relpos_reference.py, against the float64 reference,
and a tiny SAM encoder's ``--target onnxruntime-cpu`` file with the kernel swapped in against ONNX Runtime's own
attention. Writes what it measured as JSON; tests/test_arm.py judges it.

    python scripts/arm_kernel_check.py OUT.json LIBRARY [ENCODER.onnx]
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.relpos_reference import SHAPES, inputs, op_model, reference  # noqa: E402
from vitdeploy.runtime.forms.relpos_kernel import PATHS  # noqa: E402


def main(out: str, library: str, encoder: str | None = None) -> None:
    probe = ctypes.CDLL(library).VitdeployRelPosPath
    probe.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
    probe.restype = ctypes.c_int
    problems = []
    for heads, grid_h, grid_w, head_dim in SHAPES:
        for requested in PATHS:
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            options.register_custom_ops_library(library)
            model = op_model(heads, grid_h, grid_w, head_dim, PATHS.index(requested))
            session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            feeds = inputs(heads, grid_h, grid_w, head_dim)
            got = session.run(None, feeds)[0]
            want = reference(feeds["q_aug"], feeds["k_aug"], feeds["v"], heads, grid_h, grid_w)
            problems.append({"shape": [heads, grid_h, grid_w, head_dim], "requested": requested,
                             "taken": PATHS[probe(grid_h * grid_w, head_dim, PATHS.index(requested))],
                             "max_abs": float(np.abs(got - want).max())})
    record = {"machine": platform.machine(), "problems": problems}
    if encoder:
        os.environ["VITDEPLOY_ORT_OPS"] = library
        from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner

        fused = OnnxRuntimeRunner(encoder, threads=1, fused_attention=True)
        plain = OnnxRuntimeRunner(encoder, threads=1, fused_attention=False)
        x = np.random.default_rng(0).standard_normal(fused.input_shapes()["image"]).astype(np.float32)
        a, b = fused.run({"image": x})["image_embeddings"], plain.run({"image": x})["image_embeddings"]
        fusion = fused.fusion
        record["encoder"] = {"swapped": list(fusion.changed) if fusion else [],
                             "paths": sorted(set(fusion.paths.values())) if fusion else [],
                             "max_abs_rel": float(np.abs(a - b).max() / np.abs(b).max())}
    Path(out).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:])
