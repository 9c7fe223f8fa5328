"""``vitdeploy doctor`` reports the truth: each finding is checked against the component itself."""

from __future__ import annotations

import json
import sys

import onnxruntime
import pytest
import torch

from tests.cli_helpers import run
from vitdeploy.cli import cli
from vitdeploy.doctor import Component, DoctorReport, probe_components, tensorrt_unavailable_reason, verb_readiness


@pytest.fixture(scope="module", params=[False, True], ids=["fast", "deep"])
def found(request: pytest.FixtureRequest) -> dict[str, Component]:
    return probe_components(deep=request.param)


def test_doctor_imports_no_pytorch_side_package_without_a_gpu() -> None:
    """doctor took 10 s on 2 cores, 8 of them importing torch, segment_anything and timm to read their versions."""
    import subprocess

    from vitdeploy.doctor import nvidia_device_present

    if nvidia_device_present():
        pytest.skip("an NVIDIA device is present: doctor imports torch to ask CUDA about it")
    code = ("import sys; from click.testing import CliRunner; from vitdeploy.cli import cli; "
            "r = CliRunner().invoke(cli, ['doctor']); assert r.exit_code == 0, r.output; "
            "print(sorted(m for m in ('torch', 'segment_anything', 'timm', 'torchvision', 'onnxscript') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_components_match_what_is_importable(found: dict[str, Component]) -> None:
    assert found["torch"].ok and found["torch"].version == torch.__version__
    assert found["torch-cuda"].ok is torch.cuda.is_available()
    assert found["onnxruntime"].version == onnxruntime.__version__
    assert found["onnxruntime"].detail == "providers: " + ", ".join(onnxruntime.get_available_providers())
    try:
        import tensorrt
    except ImportError:
        assert not found["tensorrt"].ok and "pip install tensorrt" in found["tensorrt"].detail
    else:
        assert found["tensorrt"].ok and found["tensorrt"].version == tensorrt.__version__


def test_gpu_finding_matches_cuda(found: dict[str, Component]) -> None:
    from vitdeploy.errors import VitdeployError
    from vitdeploy.cuda import query_gpu

    try:
        gpu = query_gpu(0)
    except VitdeployError as exc:
        assert not found["gpu"].ok
        assert found["gpu"].detail == str(exc) or not found["cuda-python"].ok
    else:
        assert found["gpu"].ok and gpu.name in found["gpu"].detail
    assert (tensorrt_unavailable_reason() is None) == (found["tensorrt"].ok and found["gpu"].ok and found["polygraphy"].ok)


def test_verb_readiness_from_component_states() -> None:
    states = {"torch": True, "onnx": True, "segment_anything": True, "onnxruntime": True, "tensorrt": False,
              "polygraphy": True, "cuda-python": True, "gpu": False, "engine-build": False, "engine-run": False}
    cpu_only = {name: Component(name, ok) for name, ok in states.items()}
    status = {v.verb: v for v in verb_readiness(["export", "build-engine", "benchmark", "doctor", "newverb"], cpu_only)}
    assert status["export"].ready and status["doctor"].ready and status["newverb"].ready
    assert not status["build-engine"].ready and status["build-engine"].missing == ["engine-build"]
    assert status["benchmark"].ready
    assert "without TensorRT engines (needs engine-run)" in status["benchmark"].extras
    assert "with eager PyTorch baseline" in status["benchmark"].extras
    assert "without --runtime openvino (needs openvino)" in status["benchmark"].extras
    assert "without --inference-precision bf16 (needs openvino-bf16)" in status["benchmark"].extras
    everything = {name: Component(name, True) for name in
                  ["torch", "torch-cuda", "onnx", "segment_anything", "onnxruntime", "tensorrt", "polygraphy", "cuda-python", "gpu",
                   "fused-attention", "openvino", "openvino-bf16", "engine-build", "engine-run"]}
    status = {v.verb: v for v in verb_readiness(["build-engine", "benchmark"], everything)}
    assert status["build-engine"].ready and all(e.startswith("with ") for e in status["benchmark"].extras)


def test_bf16_line_follows_openvino_and_the_cpu(monkeypatch) -> None:
    from vitdeploy.doctor import _openvino_bf16

    assert not _openvino_bf16(Component("openvino", False), deep=False).ok
    monkeypatch.setenv("VITDEPLOY_CPU_MASK", "amx*,avx512*")  # vitdeploy's view of the CPU, read per call
    masked = _openvino_bf16(Component("openvino", True, "x"), deep=False)
    assert not masked.ok and "neither AMX-BF16 nor AVX512-BF16" in masked.detail


def test_cli_lists_every_registered_verb_and_exits_0(tmp_path: object) -> None:
    code, output = run("doctor")
    assert code == 0, output
    verbs = output.split("verbs:")[1]
    for verb in cli.commands:
        assert f"  {verb} " in verbs, output
    code, output = run("doctor", "--json")
    data = json.loads(output)
    assert set(data["components"]) >= {"torch", "onnxruntime", "tensorrt", "gpu"}
    assert {v["verb"] for v in data["verbs"]} == set(cli.commands)


def test_cli_without_either_tensorrt_says_build_engine_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    monkeypatch.setitem(sys.modules, "tensorrt_rtx_bindings", None)
    code, output = run("doctor")
    assert code == 0
    line = next(ln for ln in output.splitlines() if ln.strip().startswith("build-engine"))
    assert "unavailable: needs engine-build" in line
    builder = next(ln for ln in output.splitlines() if " engine-build " in ln)
    assert builder.strip().startswith("NO") and "needs tensorrt-rtx (any machine)" in builder


@pytest.mark.parametrize(("classic", "rtx", "gpu", "builds", "runs"), [
    (False, True, False, "TensorRT-RTX 1.7", None),          # this machine: RTX builds, nothing runs
    (True, True, True, "classic TensorRT 10.13", "tensorrt and tensorrt-rtx engines"),  # classic first where it can build
    (True, False, False, None, None),                        # classic TensorRT cannot build without a GPU
    (False, True, True, "TensorRT-RTX 1.7", "tensorrt-rtx engines"),
])
def test_engine_paths_follow_the_libraries_and_the_gpu(classic: bool, rtx: bool, gpu: bool, builds: str | None,
                                                        runs: str | None) -> None:
    from vitdeploy.doctor import _engine_paths

    comps = {"tensorrt": Component("tensorrt", classic, "10.13.0" if classic else None),
             "tensorrt-rtx": Component("tensorrt-rtx", rtx, "1.7.1.116" if rtx else None),
             "polygraphy": Component("polygraphy", True), "cuda-python": Component("cuda-python", True),
             "gpu": Component("gpu", gpu, "8.9" if gpu else None, "NVIDIA L4" if gpu else "no GPU")}
    build, run_ = _engine_paths(comps)
    assert build.ok is (builds is not None) and (builds is None or builds in build.detail), build
    assert run_.ok is (runs is not None) and (runs is None or runs in run_.detail), run_
    if not gpu:
        assert "needs an NVIDIA GPU" in run_.detail


def test_engines_cannot_run_on_a_gpu_tensorrt_rtx_refuses() -> None:
    """An H100 (9.0) with TensorRT-RTX alone: engines build, none runs (what TensorRT-RTX 1.7.1.116 said there)."""
    from vitdeploy.doctor import _engine_paths

    comps = {"tensorrt": Component("tensorrt", False), "tensorrt-rtx": Component("tensorrt-rtx", True, "1.7.1.116"),
             "polygraphy": Component("polygraphy", True), "cuda-python": Component("cuda-python", True),
             "gpu": Component("gpu", True, "9.0", "NVIDIA H100 80GB HBM3, compute capability 9.0, 81079 MiB")}
    build, run_ = _engine_paths(comps)
    assert build.ok and not run_.ok, (build, run_)
    assert "TensorRT-RTX runs no engine on NVIDIA H100 80GB HBM3 (compute capability 9.0)" in run_.detail
    assert "--builder tensorrt'" in run_.detail and "onnxruntime-gpu" in run_.detail
    # with classic TensorRT installed too, classic engines run there and RTX ones are not claimed
    comps["tensorrt"] = Component("tensorrt", True, "10.13.0")
    build, run_ = _engine_paths(comps)
    assert run_.ok and run_.detail.startswith("tensorrt engines on NVIDIA H100"), run_
    assert "not tensorrt-rtx engines: TensorRT-RTX runs no engine on NVIDIA H100 80GB HBM3 (compute capability 9.0)" in run_.detail


def test_the_torch_extra_hint_shows_only_when_the_pytorch_side_is_missing() -> None:
    """A full install without a GPU ('torch-cuda' missing) is not told to install the torch extra."""

    def report(torch_ok: bool) -> str:
        states = {"torch": torch_ok, "torch-cuda": False, "onnx": True, "segment_anything": torch_ok, "onnxruntime": True}
        components = {name: Component(name, ok) for name, ok in states.items()}
        return DoctorReport("0", components, verb_readiness(["export", "benchmark"], components)).text()

    assert "vitdeploy[torch]" not in report(True)
    assert "vitdeploy[torch]" in report(False)


def test_the_int8_line_is_this_cpu_kinds_measurement(monkeypatch) -> None:
    from vitdeploy.cpu_features import cpu_features
    from vitdeploy.doctor import int8_path
    from vitdeploy.runtime.deploy.cpu_rows import int8_measurement

    monkeypatch.setenv("VITDEPLOY_CPU_MASK", "amx*,avx512*")  # an x86 machine here decides as an AVX2 CPU
    line = int8_path(cpu_features())
    if cpu_features().x86:
        assert line.startswith("INT8 (cosine >= 0.99 vs FP32") and "6582 against 7656 ms" in line, line
    monkeypatch.setenv("VITDEPLOY_CPU_MASK", "amx*,*vnni,avx2")  # AVX-512 without VNNI, or no AVX2: not measured
    assert int8_measurement(cpu_features()) is None
    assert int8_path(cpu_features()).startswith("not measured on a CPU like this one; 'vitdeploy tune' of each file")
    assert "\n     at INT8 accuracy: not measured" in DoctorReport("0", {}, [], {"int8_path": int8_path(cpu_features())}).text()


def test_best_path_is_this_cpus_auto_default_with_the_probe_off(monkeypatch) -> None:
    from vitdeploy.cpu_features import cpu_features
    from vitdeploy.runtime.deploy.auto import explain
    from vitdeploy.runtime.deploy.cpu_rows import cpu_default

    def best_path(features):  # doctor's "best path" line: auto's own explanation
        return explain(features)[0]

    monkeypatch.setenv("VITDEPLOY_CPU_MASK", "amx*,avx512*,avx2")
    assert best_path(cpu_features()).startswith("FP32 SAM encoders and ViTs on onnxruntime file")
    monkeypatch.setenv("VITDEPLOY_CPU_MASK", "amx*,avx512*")  # AVX2 without AVX-512: SAM encoders on OpenVINO f32
    assert best_path(cpu_features()).startswith("FP32 SAM encoders on openvino file, from this CPU's default (avx2 "
                                                "without avx512f: openvino file); FP32 ViTs on onnxruntime file")
    monkeypatch.delenv("VITDEPLOY_CPU_MASK")
    expected = cpu_default("sam_image_encoder", "fp32")
    assert f"on {expected.label()}, from {expected.source}" in best_path(cpu_features())


def test_doctor_says_where_openvinos_compiled_models_are_kept(tmp_path, monkeypatch) -> None:
    """The model cache folder (VITDEPLOY_CACHE_DIR), what it holds, and that 'none' turns it off; doctor makes none."""
    from vitdeploy.doctor import model_cache
    from vitdeploy.runtime.backends.openvino_runner import openvino_version

    if openvino_version() is None:
        assert model_cache() == "none (OpenVINO is not installed)"
        return
    monkeypatch.setenv("VITDEPLOY_CACHE_DIR", str(tmp_path / "cache"))
    said = model_cache()
    assert said.startswith(f"{tmp_path / 'cache' / 'openvino' / openvino_version()} (empty;") and not (tmp_path / "cache").exists()
    (tmp_path / "cache" / "openvino" / openvino_version()).mkdir(parents=True)
    (tmp_path / "cache" / "openvino" / openvino_version() / "blob").write_bytes(b"x" * 3_000_000)
    assert "(1 file(s), 3 MB;" in model_cache()
    monkeypatch.setenv("VITDEPLOY_CACHE_DIR", "none")
    assert model_cache().startswith("off (VITDEPLOY_CACHE_DIR=none)")
