"""Can an engine run here? TensorRT version and GPU rules, from plain sidecar dictionaries.

The rules under test are vitdeploy's reading of TensorRT's "Engine Compatibility" documentation; the
environments are values, not a TensorRT pretending to run.
"""

from __future__ import annotations

import pytest

from vitdeploy.engine.compat import RunningEnvironment, check_engine_compat, version_can_run
from vitdeploy.errors import EngineError

L4 = RunningEnvironment("10.13.0.35", "NVIDIA L4", "8.9")


def sidecar(trt: str = "10.13.0.35", gpu: str = "NVIDIA L4", cc: str = "8.9", *, version_compatible: bool = False,
            hardware: str = "none") -> dict:
    return {
        "tensorrt": {"version": trt},
        "gpu": {"name": gpu, "compute_capability": cc},
        "onnx": {"file": "m.onnx"},
        "build_options": {"version_compatible": version_compatible, "hardware_compatibility": hardware},
    }


@pytest.mark.parametrize(
    ("built", "running", "vc", "ok"),
    [
        ("10.13.0.35", "10.13.0.35", False, True),
        ("10.13.0.35", "10.13.0", False, True),  # same release, other packaging (build number differs)
        ("10.13.0.35", "10.13.3.9", False, False),
        ("10.13.0.35", "10.12.0.36", False, False),
        ("10.8.0", "10.13.0", True, True),  # version compatible: later release, same major
        ("10.13.0", "10.8.0", True, False),  # never an older runtime
        ("10.13.0", "11.1.0", True, True),  # documented cross-major pair 10 -> 11
        ("8.6.1", "10.4.0", True, True),  # documented pair 8 -> 10
        ("8.6.1", "11.1.0", True, False),  # 8 -> 11 is not supported
        ("11.0.0", "11.4.1", True, True),
        ("", "10.13.0", False, False),
    ],
)
def test_version_rules(built: str, running: str, vc: bool, ok: bool) -> None:
    assert version_can_run(built, running, vc) is ok


def test_same_build_and_gpu_runs_without_warnings() -> None:
    assert check_engine_compat(sidecar(), L4, "m.plan") == []


def test_other_tensorrt_release_names_both_versions_and_the_fix() -> None:
    with pytest.raises(EngineError) as err:
        check_engine_compat(sidecar(trt="10.8.0.43"), L4, "m.plan")
    text = str(err.value)
    assert "'m.plan' was built with TensorRT 10.8.0.43 and this is TensorRT 10.13.0.35" in text
    assert "--version-compatible" in text and "vitdeploy build-engine" in text and "m.onnx" in text


def test_version_compatible_engine_runs_on_a_later_release_but_not_an_older_one() -> None:
    assert check_engine_compat(sidecar(trt="10.8.0", version_compatible=True), L4) == []
    with pytest.raises(EngineError, match="same or a newer TensorRT"):
        check_engine_compat(sidecar(trt="10.16.1", version_compatible=True), L4)


def test_other_architecture_is_refused_with_both_gpus_named() -> None:
    with pytest.raises(EngineError) as err:
        check_engine_compat(sidecar(gpu="NVIDIA A100-SXM4-80GB", cc="8.0"), L4, "m.plan")
    text = str(err.value)
    assert "built on NVIDIA A100-SXM4-80GB (compute capability 8.0)" in text
    assert "this GPU is NVIDIA L4 (compute capability 8.9)" in text and "ampere_plus" in text


def test_other_model_same_architecture_is_a_warning() -> None:
    warnings = check_engine_compat(sidecar(gpu="NVIDIA GeForce RTX 4090"), L4, "m.plan")
    assert len(warnings) == 1 and "RTX 4090" in warnings[0] and "NVIDIA L4" in warnings[0]


def test_hardware_compatibility_levels() -> None:
    turing = RunningEnvironment("10.13.0", "Tesla T4", "7.5")
    assert check_engine_compat(sidecar(gpu="NVIDIA A100", cc="8.0", hardware="ampere_plus"), L4) == []
    with pytest.raises(EngineError, match="for Ampere and newer GPUs, but this GPU is Tesla T4"):
        check_engine_compat(sidecar(cc="8.0", hardware="ampere_plus"), turing)
    assert check_engine_compat(sidecar(gpu="NVIDIA L40S", hardware="same_compute_capability"), L4) == []
    with pytest.raises(EngineError, match="do not move between GPU architectures"):
        check_engine_compat(sidecar(cc="8.6", hardware="same_compute_capability"), L4)
    with pytest.raises(EngineError, match="unknown hardware compatibility level 'bogus'"):
        check_engine_compat(sidecar(hardware="bogus"), L4)
