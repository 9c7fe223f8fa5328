"""vitdeploy's torch-free runtime on 64-bit Arm (aarch64) under qemu, on the files exported here: the same answers.

scripts/arm-check.sh runs scripts/runtime_check.py on both machines (the SAM predictor, the automatic mask
generator, a dataset job in one process, bad inputs, the predictor on OpenVINO, SAM 2 video tracking unless
VITDEPLOY_ARM_VIDEO=0); this
compares what each wrote. It runs
where the arm64 root exists (made once by ``sudo scripts/arm-check.sh``: debootstrap and pip, about 6 minutes) and
this process is root; elsewhere it skips and says why. Emulation proves behaviour, not speed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vitdeploy.parity import TOLERANCES
from vitdeploy.validation.masks import compare_masks

pytestmark = pytest.mark.arm

ROOT = Path(__file__).resolve().parents[1]
ARM_ROOT = Path(os.environ.get("VITDEPLOY_ARM_ROOT", "/var/cache/vitdeploy/arm64-root"))
#: The same float32 graphs in ONNX Runtime's x86-64 (AVX-512/AVX2) and aarch64 (NEON) kernels: sums in another order,
#: so a logit within rounding of 0 may fall either side of the mask threshold: the masks are held to the fp32 mask
#: budget (vitdeploy.validation.masks), the scores to SCORE_ATOL.
SCORE_ATOL = 1e-4
EMBEDDING_COSINE = 0.99999


def _same_masks(reference: np.ndarray, candidate: np.ndarray, label: str) -> None:
    agreement = compare_masks(reference, candidate, "fp32", label=label)
    assert agreement, agreement.summary()


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    if not (ARM_ROOT / "usr" / "bin" / "python3").exists():
        pytest.skip(f"no arm64 root at {ARM_ROOT}: 'sudo scripts/arm-check.sh' makes it once (about 6 min), "
                    "then this test runs it")
    if os.geteuid() != 0:
        pytest.skip("the arm check chroots into its arm64 root: run the suite as root")
    out = tmp_path_factory.mktemp("arm")
    done = subprocess.run(["bash", str(ROOT / "scripts" / "arm-check.sh"), str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=3600, env={**os.environ, "PYTHON_X86": sys.executable})
    if done.returncode == 77:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    print(done.stderr)
    loaded = []
    for machine in ("x86_64", "aarch64"):
        data = np.load(out / f"{machine}.npz")
        loaded.append({"record": json.loads(str(data["record"])), **{k: data[k] for k in data.files if k != "record"}})
    loaded[1]["folder"] = out  # the C++ part's outputs are files there
    return loaded[0], loaded[1]


def test_both_machines_ran_every_part(both) -> None:
    x86, arm = both
    assert (x86["record"]["machine"], arm["record"]["machine"]) == ("x86_64", "aarch64")
    assert "asimd" in arm["record"]["cpu"] and "avx" not in arm["record"]["cpu"], arm["record"]["cpu"]  # its own CPU
    assert x86["record"]["errors"] == {} and arm["record"]["errors"] == {}, (x86["record"]["errors"], arm["record"]["errors"])
    print("seconds x86_64:", x86["record"]["seconds"], "aarch64 under qemu:", arm["record"]["seconds"])


def test_sam_predictor_masks_scores_and_embedding_match(both) -> None:
    x86, arm = both
    assert _cosine(x86["sam_embedding"], arm["sam_embedding"]) >= EMBEDDING_COSINE
    for k in range(3):
        assert x86[f"sam_masks_{k}"].shape == arm[f"sam_masks_{k}"].shape
        _same_masks(x86[f"sam_masks_{k}"], arm[f"sam_masks_{k}"], f"prompt {k}")
        np.testing.assert_allclose(arm[f"sam_scores_{k}"], x86[f"sam_scores_{k}"], atol=SCORE_ATOL)


def test_openvinos_arm_plugin_runs_the_encoder_and_the_probe_judges_its_decoder(both) -> None:
    """OpenVINO's Arm CPU plugin runs the encoder in f32 under qemu (given a constructed /sys and /proc/cpuinfo): the
    embedding and masks (decoder on ONNX Runtime) are ONNX Runtime's on x86-64 within the fp32 budget. Its decoder is
    held to the same budget by the first-use probe on each machine: where it misses (OpenVINO 2026.4.1's Arm plugin
    under qemu 7.2 gave the tiny decoder's low-res masks cosine 0.54 against ONNX Runtime's, from its ConvTranspose
    on), the probe rules it out with the reason and chooses ONNX Runtime."""
    x86, arm = both
    assert _cosine(x86["sam_embedding"], arm["openvino_embedding"]) >= EMBEDDING_COSINE
    _same_masks(x86["sam_masks_0"], arm["openvino_masks"], "OpenVINO encoder on aarch64 against ONNX Runtime on x86-64")
    np.testing.assert_allclose(arm["openvino_scores"], x86["sam_scores_0"], atol=SCORE_ATOL)
    for machine in (x86, arm):
        record = machine["record"]
        cosine = min(record["openvino_decoder_cosine"].values())
        openvino = next(t for t in record["decoder_probe"]["timings"] if t["label"] == "openvino file")
        print(record["machine"], "OpenVINO decoder cosine vs ONNX Runtime:", record["openvino_decoder_cosine"],
              "| probe:", record["decoder_probe"]["chosen"], "| openvino:", openvino["reason"] or "held",
              "| fp16 policy on the encoder:", record["openvino_fp16"])
        if cosine < TOLERANCES["fp32"].cosine_min:  # the probe's budget for the decoder: it must have said so
            assert "over its 'fp32' budget" in openvino["reason"], openvino
            assert record["decoder_probe"]["chosen"] == "onnxruntime file"
    if "openvino_fp16_embedding" in arm:
        print("aarch64 FP16-policy embedding, cosine against x86-64 FP32:",
              _cosine(x86["sam_embedding"], arm["openvino_fp16_embedding"]))


def test_mask_generator_finds_the_same_masks(both) -> None:
    x86, arm = both
    assert len(x86["amg_masks"]) == len(arm["amg_masks"]) > 0
    _same_masks(x86["amg_masks"], arm["amg_masks"], "mask generator")
    np.testing.assert_allclose(arm["amg_iou"], x86["amg_iou"], atol=SCORE_ATOL)


def test_video_tracking_gives_the_same_masks_on_every_frame(both) -> None:
    x86, arm = both
    if "video_masks" not in arm:
        pytest.skip("SAM 2 video was left out (VITDEPLOY_ARM_VIDEO=0: on some hosts qemu took more than 13 min for "
                    "its three tiny frames)")
    assert x86["video_masks"].shape == arm["video_masks"].shape
    _same_masks(x86["video_masks"], arm["video_masks"], "video")


def test_a_dataset_job_writes_the_same_embeddings(both) -> None:
    x86, arm = both
    assert [Path(p).name for p in x86["job_images"]] == [Path(p).name for p in arm["job_images"]]
    assert min(_cosine(a, b) for a, b in zip(x86["job_embeddings"], arm["job_embeddings"])) >= EMBEDDING_COSINE


def test_bad_inputs_get_the_same_answers(both) -> None:
    x86, arm = both
    assert x86["record"]["bad_inputs"] == arm["record"]["bad_inputs"]
    assert all(a["exit"] == 1 and a["wrote"] == [] and a["error"] and not a["traceback"]
               for a in arm["record"]["bad_inputs"].values())


def test_the_cpp_library_cross_built_for_aarch64_gives_the_python_mask(both) -> None:
    """cpp/ cross-built with Debian's g++-aarch64-linux-gnu against the arm64 root (cpp/cmake/aarch64-linux-gnu.cmake):
    its unit tests pass on aarch64, and sam_cli's mask for the click equals the x86-64 Python predictor's."""
    from PIL import Image

    x86, arm = both
    folder = arm["folder"]
    if not (folder / "cpp-aarch64.json").is_file():
        pytest.skip("the C++ part was not run (VITDEPLOY_ARM_CPP=0)")
    assert " 0 failed" in (folder / "cpp-unit.txt").read_text().splitlines()[-1]
    summary = json.loads((folder / "cpp-aarch64.json").read_text())
    best = int(np.argmax(x86["sam_scores_0"]))
    mask = np.asarray(Image.open(folder / "cpp-mask.png")) > 0
    assert summary["mask_index"] == best
    np.testing.assert_allclose(summary["scores"], x86["sam_scores_0"], atol=SCORE_ATOL)
    print(f"sam_cli on aarch64 vs the x86-64 Python predictor: {int((mask != x86['sam_masks_0'][best]).sum())} "
          "pixels differ")
    _same_masks(x86["sam_masks_0"][best], mask, "sam_cli")


def test_the_cpp_library_reads_the_emulated_arm_cpu_as_python_does(both) -> None:
    """Under qemu-user, /proc/cpuinfo is the x86 host's: the C++ library names the arm64 CPU's features from the
    auxiliary vector, as Python does (the bit names in vitdeploy/data/runtime_facts.json), so a profile the aarch64
    Python runtime wrote for this machine is one sam_cli's --runtime auto takes as its own."""
    _, arm = both
    folder = arm["folder"]
    if not (folder / "cpp-auto.txt").exists():
        pytest.skip("the C++ part was left out (VITDEPLOY_ARM_CPP=0)")
    machine = json.loads((folder / "fingerprint-aarch64.json").read_text())
    assert machine["machine"] == "aarch64" and "asimd" in machine["flags"], machine
    assert not {"avx2", "avx512f"} & set(machine["flags"]), machine  # the host's x86 flags are not the Arm CPU's
    said = (folder / "cpp-auto.txt").read_text()
    assert "sam_enc.profile.json: onnxruntime file, 1 thread(s)" in said and "ignored" not in said, said


def test_the_fused_kernels_neon_path_matches_the_float64_reference(both) -> None:
    """On arm64 every vector request takes the kernel's NEON path (portable stays portable, and shapes the vector
    paths do not take stay portable), each within the float64 budget the x86 paths are held to; swapped into a tiny
    SAM encoder it gives ONNX Runtime's own attention's numbers."""
    from tests.relpos_reference import KERNEL_MAX_ABS, expected_path

    _, arm = both
    path = arm["folder"] / "kernel-aarch64.json"
    if not path.exists():
        pytest.skip("the C++ part was left out (VITDEPLOY_ARM_CPP=0)")
    record = json.loads(path.read_text())
    assert record["machine"] == "aarch64"
    taken = {p["taken"] for p in record["problems"]}
    assert taken == {"neon", "portable"}, taken
    for problem in record["problems"]:
        heads, grid_h, grid_w, head_dim = problem["shape"]
        assert problem["taken"] == expected_path(grid_h * grid_w, head_dim, problem["requested"], "neon"), problem
        assert problem["max_abs"] <= KERNEL_MAX_ABS, problem
    encoder = record["encoder"]
    assert encoder["swapped"] and encoder["paths"] == ["neon"], encoder
    assert encoder["max_abs_rel"] <= 1e-5, encoder  # FUSED_VS_MHA_MAX_ABS_REL of the x86 kernel tests
    print(f"NEON kernel: {len(record['problems'])} problems, max-abs "
          f"{max(p['max_abs'] for p in record['problems']):.2e}; encoder fused vs ONNX Runtime {encoder['max_abs_rel']:.2e}")
