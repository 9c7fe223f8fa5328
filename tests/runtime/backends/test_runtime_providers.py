"""Every runtime target right or refused: the provider plan is decided from the file's metadata, no GPU needed."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import TINY_ARCHS, tiny_encoder
from vitdeploy.cli import cli
from vitdeploy.errors import InputError
from vitdeploy.models.recipes import SAM_PIXEL_MEAN, SAM_PIXEL_STD
from vitdeploy.onnx_export.sam_encoder import export_sam_image_encoder, sam_encoder_metadata
from vitdeploy.runtime.backends.providers import plan_providers
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner

ENCODER = {"family": "sam_image_encoder", "precision": "fp32"}


def test_cpu_runs_everything_and_refuses_tf32() -> None:
    for target in ("generic", "tensorrt", "onnxruntime-cpu"):
        plan = plan_providers({**ENCODER, "target": target}, "cpu")
        assert plan.providers == ["CPUExecutionProvider"] and plan.tf32 is None
    with pytest.raises(InputError, match="--tf32 applies to CUDA"):
        plan_providers(ENCODER, "cpu", tf32=True)


@pytest.mark.parametrize("device", ["cuda", "tensorrt"])
def test_onnxruntime_cpu_target_is_refused_on_gpu_providers(device: str) -> None:
    with pytest.raises(InputError, match="runs on the CPU only.*relative L2 0.114.*export with --target generic or tensorrt"):
        plan_providers({**ENCODER, "target": "onnxruntime-cpu"}, device, allow_unverified=True)


def test_cuda_is_fp32_unless_tf32_is_asked_for() -> None:
    exact = plan_providers({**ENCODER, "target": "generic"}, "cuda")
    assert exact.providers[0] == ("CUDAExecutionProvider", {"use_tf32": "0"}) and exact.tf32 is False
    assert "TF32 off" in exact.describe() and "H100" in exact.describe()
    fast = plan_providers({**ENCODER, "target": "tensorrt"}, "cuda", tf32=True)
    assert fast.providers[0] == ("CUDAExecutionProvider", {"use_tf32": "1"}) and "TF32 on" in fast.describe()
    assert plan_providers(ENCODER, "cuda").verified == exact.verified  # no recorded target: the generic graph


@pytest.mark.parametrize("meta", [{"family": "sam_mask_decoder", "precision": "fp16"},
                                  {**ENCODER, "target": "tensorrt", "precision": "int8"},
                                  {"family": "timm_vit", "precision": "fp16"}])
def test_unverified_combinations_need_the_callers_word(meta: dict) -> None:
    with pytest.raises(InputError, match="has not been verified on ONNX Runtime's CUDAExecutionProvider.*--allow-unverified"):
        plan_providers(meta, "cuda")
    assert plan_providers(meta, "cuda", allow_unverified=True).verified.startswith("NOT verified")
    with pytest.raises(InputError, match="TensorrtExecutionProvider"):
        plan_providers({**ENCODER, "target": "generic"}, "tensorrt")  # ORT's TensorRT provider: never verified


@pytest.fixture(scope="module")
def ort_cpu_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    arch = TINY_ARCHS["padded_windows"]
    meta = sam_encoder_metadata(variant="tiny", input_size=arch.img_size, pixel_mean=SAM_PIXEL_MEAN, pixel_std=SAM_PIXEL_STD,
                                architecture=arch.to_dict(), random_seed=0, target="onnxruntime-cpu")
    path = tmp_path_factory.mktemp("providers") / "ort_cpu.onnx"
    return export_sam_image_encoder(tiny_encoder(seed=0), path, metadata=meta, target="onnxruntime-cpu").path


def _pretend_cuda(monkeypatch) -> None:
    """ONNX Runtime reports a CUDA provider: the refusal below comes from the plan, before any session."""
    import onnxruntime

    real = onnxruntime.get_available_providers()
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", *real])


def test_runner_refuses_before_asking_onnxruntime(ort_cpu_export: Path, monkeypatch) -> None:
    """Where CUDA is installed, the target refusal comes before any session, with the fix named (without CUDA,
    the missing provider is said first: tests/test_user_inputs.py)."""
    _pretend_cuda(monkeypatch)
    with pytest.raises(InputError, match="--target onnxruntime-cpu, which runs on the CPU only"):
        OnnxRuntimeRunner(ort_cpu_export, device="cuda", allow_unverified=True)
    assert OnnxRuntimeRunner(ort_cpu_export, device="cpu").provider.startswith("CPUExecutionProvider")


def test_cli_says_it_in_one_line(ort_cpu_export: Path, monkeypatch) -> None:
    _pretend_cuda(monkeypatch)
    result = CliRunner().invoke(cli, ["benchmark", str(ort_cpu_export), "--device", "cuda", "--no-eager", "--runs", "1"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1].startswith("error: 'ort_cpu.onnx' was exported with --target onnxruntime-cpu")


def test_a_quiet_fall_back_to_the_cpu_is_refused() -> None:
    """ONNX Runtime only logs it when its CUDA provider fails to load (a missing cuDNN, say) and runs on the CPU:
    the runner must say so instead of reporting CPU numbers as CUDA ones."""
    from vitdeploy.runtime.backends.onnxruntime_runner import _require_session_on

    class FellBack:
        def get_providers(self) -> list[str]:
            return ["CPUExecutionProvider"]

    with pytest.raises(InputError, match="could not start its CUDAExecutionProvider for 'm.onnx' and fell back to "
                                         "CPUExecutionProvider.*onnxruntime-gpu\\[cuda,cudnn\\].*--device cpu"):
        _require_session_on(FellBack(), "CUDAExecutionProvider", "'m.onnx'")
