"""vitdeploy's fused rel-pos attention kernel (ONNX Runtime custom op): same numbers, swapped only where proven safe."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from click.testing import CliRunner
from onnx import TensorProto, helper

from cpp_build import cpp_build, toolchain_missing  # noqa: F401 (session fixture)
from tests.relpos_reference import KERNEL_MAX_ABS, SHAPES, expected_path, inputs, op_model, reference
from tests.conftest import (TINY_ARCHS, assert_matches_official, export_tiny_targets, max_abs_rel, tamper_onehot_tables,
                            tiny_encoder)
from vitdeploy.cli import cli
from vitdeploy.errors import InputError
from vitdeploy.runtime.forms import relpos_kernel
from vitdeploy.targets import TARGETS
from vitdeploy.runtime.forms.cpu_attention import cpu_attention
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner

ARCH = "padded_windows"  # two windowed blocks (9 tokens: left to ONNX Runtime) and one 8x8 global block
#: Fused vs unfused ONNX Runtime graph, max-abs error relative to the output scale (reordered float sums).
FUSED_VS_MHA_MAX_ABS_REL = 1e-5

pytestmark = pytest.mark.skipif(toolchain_missing() is not None, reason=str(toolchain_missing()))


@pytest.fixture(scope="module")
def library(cpp_build: Path) -> Path:  # noqa: F811
    """cpp/build/libvitdeploy_ort_ops.so, from the session's ``cpp/build.sh`` run."""
    path = cpp_build / relpos_kernel.LIBRARY_NAME
    assert path.is_file()
    assert relpos_kernel.library_path() == path  # the default location the runner looks in
    return path


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return export_tiny_targets(tmp_path_factory.mktemp("relpos_kernel"), ARCH, seed=7)


def _expected_path(tokens: int, head_dim: int, requested: str) -> str:
    """The rule for this machine's real CPU (the library checks the real CPU, not VITDEPLOY_CPU_MASK)."""
    from vitdeploy.cpu_features import _read

    return expected_path(tokens, head_dim, requested, _read("", "/proc/cpuinfo").simd)


def _global_block_shape() -> tuple[int, int]:
    arch = TINY_ARCHS[ARCH]
    grid = arch.img_size // arch.patch_size
    return grid * grid, arch.embed_dim // arch.num_heads


@pytest.mark.parametrize("requested", relpos_kernel.PATHS)
@pytest.mark.parametrize(("heads", "grid_h", "grid_w", "head_dim"), SHAPES)
def test_op_matches_float64_reference(library: Path, heads: int, grid_h: int, grid_w: int, head_dim: int,
                                      requested: str) -> None:
    """Every path the library has, forced through the node's isa attribute, on whatever CPU runs this: the
    path taken is the one the rule says for this CPU, and its numbers match float64."""
    taken = relpos_kernel.kernel_path(grid_h * grid_w, head_dim, library, requested)
    assert taken == _expected_path(grid_h * grid_w, head_dim, requested)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.register_custom_ops_library(str(library))
    model = op_model(heads, grid_h, grid_w, head_dim, relpos_kernel.PATHS.index(requested))
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = inputs(heads, grid_h, grid_w, head_dim)
    q_aug, k_aug, v = feeds["q_aug"], feeds["k_aug"], feeds["v"]
    out = session.run(None, {"q_aug": q_aug, "k_aug": k_aug, "v": v})[0]
    err = float(np.abs(out - reference(q_aug, k_aug, v, heads, grid_h, grid_w)).max())
    print(f"asked {requested}, took {taken}: max-abs {err:.2e}")
    assert err <= KERNEL_MAX_ABS, f"{taken} path: max-abs error {err:.3g}"


#: VITDEPLOY_CPU_MASK values: this CPU as it is, as an AVX2-only one, as one without AVX2 (portable only).
CPU_KINDS = {"this CPU": "", "as AVX2-only": "avx512*,amx*,avx_vnni", "as pre-AVX2": "avx512*,amx*,avx_vnni,avx2,fma"}


@pytest.mark.parametrize("kind", list(CPU_KINDS))
def test_fused_runner_matches_official_and_mha(library: Path, exports: dict[str, Path], kind: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner asks for the path the (masked) CPU allows; where that is only the portable path it keeps
    ONNX Runtime's attention and says so. The numbers are the official model's either way. The runner's
    default (no fused_attention given) takes the kernel exactly where it takes a vector path, else unfolds, silently."""
    monkeypatch.setenv("VITDEPLOY_CPU_MASK", CPU_KINDS[kind])
    expected = _expected_path(*_global_block_shape(), relpos_kernel.requested_path())
    fused = OnnxRuntimeRunner(exports["onnxruntime-cpu"], threads=2, fused_attention=True)
    plain = OnnxRuntimeRunner(exports["onnxruntime-cpu"], threads=2, fused_attention=False)
    default = OnnxRuntimeRunner(exports["onnxruntime-cpu"], threads=2)
    arch = TINY_ARCHS[ARCH]
    assert plain.fusion is None and len(plain.unfold.changed) == len(arch.global_attn_indexes)
    assert default.warnings == []
    if expected == "portable":
        assert fused.fusion.changed == [] and fused.warnings and "running ONNX Runtime's attention" in fused.warnings[0]
        assert default.fusion is None and default.unfold.changed == plain.unfold.changed
    else:
        assert len(fused.fusion.changed) == len(arch.global_attn_indexes)  # the global block
        assert set(fused.fusion.paths.values()) == {expected} and fused.warnings == []
        assert default.unfold is None and default.fusion.changed == fused.fusion.changed
        assert default.fusion.paths == fused.fusion.paths
    # The windowed blocks (9 tokens) always, the global block too where the CPU has no vector path: one reason.
    assert len(fused.fusion.kept) == arch.depth - len(fused.fusion.changed)
    reasons = {r.split(":")[1] for r in fused.fusion.kept.values()}
    assert len(reasons) == 1 and "only the kernel's portable path" in reasons.pop()
    official = tiny_encoder(ARCH, seed=7)
    for seed in (0, 1):
        x = torch.randn(1, 3, arch.img_size, arch.img_size, generator=torch.Generator().manual_seed(seed))
        out = assert_matches_official(official, fused, x, f"fused {expected} seed {seed}")
        mha = plain.run({"image": x.numpy()})["image_embeddings"]
        assert max_abs_rel(out, mha) <= FUSED_VS_MHA_MAX_ABS_REL
        assert max_abs_rel(default.run({"image": x.numpy()})["image_embeddings"], out) <= FUSED_VS_MHA_MAX_ABS_REL


def test_tensorrt_export_takes_the_kernel_too(library: Path, tmp_path: Path) -> None:
    """A --target tensorrt file: its MatMul-Softmax-MatMul chains become MultiHeadAttention first
    (vitdeploy.runtime.forms.folded_sdpa), then the kernel takes what it takes in the onnxruntime-cpu export."""
    path = export_tiny_targets(tmp_path, ARCH, seed=7, targets=("tensorrt",))["tensorrt"]
    fused = OnnxRuntimeRunner(path, threads=2, fused_attention=True)
    arch = TINY_ARCHS[ARCH]
    assert len(fused.sdpa.changed) == arch.depth
    expected = _expected_path(*_global_block_shape(), relpos_kernel.requested_path())
    assert len(fused.fusion.changed) == (0 if expected == "portable" else len(arch.global_attn_indexes))
    official = tiny_encoder(ARCH, seed=7)
    x = torch.randn(1, 3, arch.img_size, arch.img_size, generator=torch.Generator().manual_seed(5))
    assert_matches_official(official, fused, x, "tensorrt target, fused")


def test_swap_needs_the_exact_one_hot_keys(library: Path, exports: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no attention the fused kernel can take"):
        cpu_attention(exports["generic"], TARGETS["generic"], fused_attention=True, folded_attention=False,
                      library=library)  # no folded attention at all
    model = onnx.load(str(exports["onnxruntime-cpu"]))
    _, report = relpos_kernel.fuse_relpos_attention(onnx.load(str(exports["onnxruntime-cpu"])), library)
    # Untouched, the global block passes the layout check (swapped, or on a CPU without a vector path kept for that) ...
    assert len(report.changed) + len(report.portable_only) == 3 and len(report.changed) <= 1
    assert tamper_onehot_tables(model)  # one key in two columns
    _, report = relpos_kernel.fuse_relpos_attention(model, library)  # ... tampered, nothing is
    assert report.changed == []
    assert set(report.kept.values()) == {"the key table is not the one-hot rel-pos layout"}


def test_missing_library_is_a_clear_error(exports: dict[str, Path], tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(relpos_kernel.LIBRARY_ENV, str(tmp_path / "nowhere.so"))
    result = CliRunner().invoke(cli, ["validate", str(exports["onnxruntime-cpu"]), "--fused-attention", "--runs", "0"])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    last = result.output.strip().splitlines()[-1]
    assert "nowhere.so not found" in last and "cpp/build.sh" in last


def test_the_default_without_a_usable_library(exports: dict[str, Path], tmp_path: Path, monkeypatch) -> None:
    """Not built: the default unfolds and says nothing (a base install has no library). Built but unusable (here
    not a shared library at all): the default still runs, unfolded, with a warning naming the rebuild."""
    model = str(exports["onnxruntime-cpu"])
    monkeypatch.setenv(relpos_kernel.LIBRARY_ENV, str(tmp_path / "nowhere.so"))
    absent = OnnxRuntimeRunner(model, threads=2)
    assert absent.fusion is None and absent.unfold.changed and absent.warnings == []
    broken = tmp_path / relpos_kernel.LIBRARY_NAME
    broken.write_bytes(b"not an ELF file")
    monkeypatch.setenv(relpos_kernel.LIBRARY_ENV, str(broken))
    stale = OnnxRuntimeRunner(model, threads=2)
    assert stale.fusion is None and stale.unfold.changed == absent.unfold.changed
    assert len(stale.warnings) == 1 and "cannot be loaded" in stale.warnings[0] and "cpp/build.sh" in stale.warnings[0]
    # A file with no folded attention never looks for the library, so it has nothing to say about it.
    assert OnnxRuntimeRunner(exports["generic"], threads=2).warnings == []
    said = CliRunner().invoke(cli, ["validate", model, "--random-inputs", "1", "--runs", "0"])
    assert said.exit_code == 0, said.output
    assert "warning: vitdeploy's fused attention kernel is not used" in said.output
    asked = CliRunner().invoke(cli, ["validate", model, "--fused-attention", "--random-inputs", "1", "--runs", "0"])
    assert asked.exit_code == 1 and "Traceback" not in asked.output, asked.output


def test_a_library_onnx_runtime_refuses_is_a_clear_error(tmp_path: Path) -> None:
    """Registration is ONNX Runtime's own check (the library's API version against this onnxruntime): its refusal
    is a one-line InputError naming the rebuild and the way around it, not ONNX Runtime's exception."""
    from vitdeploy.runtime.backends.onnxruntime_runner import _register_kernel

    not_a_library = tmp_path / relpos_kernel.LIBRARY_NAME
    not_a_library.write_bytes(b"not an ELF file")
    with pytest.raises(InputError, match="ONNX Runtime refused the fused attention kernel .*cpp/build.sh.*--no-fused-attention"):
        _register_kernel(ort.SessionOptions(), not_a_library)


def test_validate_and_benchmark_run_the_fused_kernel(library: Path, exports: dict[str, Path]) -> None:
    expected = _expected_path(*_global_block_shape(), relpos_kernel.requested_path())
    model = str(exports["onnxruntime-cpu"])
    validated = CliRunner().invoke(cli, ["validate", model, "--fused-attention", "--random-inputs", "1", "--runs", "0"])
    assert validated.exit_code == 0, validated.output
    if expected == "portable":
        assert "warning: fused attention: no attention node can take" in validated.output
    else:
        assert f"1 attention node(s) on vitdeploy's kernel ({expected} path), 2 left to ONNX Runtime" in validated.output
    timed = CliRunner().invoke(cli, ["benchmark", model, "--fused-attention", "--no-eager", "--runs", "1", "--warmup", "0"])
    assert timed.exit_code == 0, timed.output
    assert "fused rel-pos kernel" in timed.output
    # Without the option the label says what the default ran; --no-fused-attention keeps ONNX Runtime's attention.
    for option, kernel in (([], expected != "portable"), (["--no-fused-attention"], False)):
        timed = CliRunner().invoke(cli, ["benchmark", model, *option, "--no-eager", "--runs", "1", "--warmup", "0"])
        assert timed.exit_code == 0, timed.output
        assert ("fused rel-pos kernel" in timed.output) == kernel, (option, timed.output)


def test_int8_graph_takes_the_kernel_with_the_same_numbers(library: Path, exports: dict[str, Path], tmp_path: Path) -> None:
    """Calibration keeps the folded attention float: the swap applies to INT8 graphs unchanged."""
    from vitdeploy.precision.calibration_data import bundled_calibration_dir

    arch = TINY_ARCHS[ARCH]
    expected = _expected_path(*_global_block_shape(), relpos_kernel.requested_path())
    int8 = tmp_path / "int8.onnx"
    done = CliRunner().invoke(cli, ["calibrate", str(exports["onnxruntime-cpu"]), "-p", "int8", "-o", str(int8), "--no-eager",
                                    "-i", str(bundled_calibration_dir()), "--cache-dir", str(tmp_path / "cache")])
    assert done.exit_code == 0, done.output
    fused = OnnxRuntimeRunner(int8, threads=2, fused_attention=True)
    plain = OnnxRuntimeRunner(int8, threads=2, fused_attention=False)
    assert len(fused.fusion.changed) == (0 if expected == "portable" else len(arch.global_attn_indexes))
    x = torch.randn(1, 3, arch.img_size, arch.img_size, generator=torch.Generator().manual_seed(3)).numpy()
    out, ref = fused.run({"image": x})["image_embeddings"], plain.run({"image": x})["image_embeddings"]
    assert max_abs_rel(out, ref) <= FUSED_VS_MHA_MAX_ABS_REL


def test_swap_imports_no_torch(library: Path, exports: dict[str, Path]) -> None:
    """The runtime package promises applications without PyTorch: the swap and the fused session too."""
    code = ("import sys\n"
            "from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner\n"
            f"runner = OnnxRuntimeRunner({str(exports['onnxruntime-cpu'])!r}, fused_attention=True)\n"
            "assert len(runner.fusion.changed) + len(runner.fusion.portable_only) == 3, runner.fusion\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **{relpos_kernel.LIBRARY_ENV: str(library)}))
    assert done.returncode == 0, done.stderr[-3000:]
