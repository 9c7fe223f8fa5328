"""The tiny SAM 3 image model's three files (``sam3_tiny``, ``sam3_tiny_text``, ``sam3_tiny_detector``, seed
:data:`SEED`), exported once per test run for every test that runs them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.once_per_run import once_per_run

SEED = 6
RECIPES = {"vision": "sam3_tiny", "text": "sam3_tiny_text", "detector": "sam3_tiny_detector"}


def sam3_tiny_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(vision encoder, text encoder, detector) of one seeded tiny model."""
    from vitdeploy.pipeline import export_from_recipe

    made = once_per_run(tmp_path_factory, "sam3_tiny_model", lambda root: {
        part: export_from_recipe(recipe, root / f"{recipe}.onnx", random_weights=True, seed=SEED).path
        for part, recipe in RECIPES.items()})
    return made["vision"], made["text"], made["detector"]


def sam3_tiny_interactive_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The interactive (click) decoder of the same seeded tiny model (``sam3_tiny_interactive``)."""
    from vitdeploy.pipeline import export_from_recipe

    made = once_per_run(tmp_path_factory, "sam3_tiny_interactive", lambda root: {
        "interactive": export_from_recipe("sam3_tiny_interactive", root / "sam3_tiny_interactive.onnx",
                                          random_weights=True, seed=SEED).path})
    return made["interactive"]


def sam3_tiny_files_with_vocab(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """:func:`sam3_tiny_files` for tests that tokenize text: skipped, saying why, where CLIP's vocabulary is not."""
    from vitdeploy.errors import InputError
    from vitdeploy.runtime.processing.clip_tokenizer import default_vocab

    try:
        default_vocab()
    except InputError as exc:
        pytest.skip(f"CLIP's vocabulary is not installed ({exc}; scripts/test.sh installs open_clip_torch)")
    return sam3_tiny_files(tmp_path_factory)


def official_sam3_processor(vocab: Path):
    """The official ``Sam3Processor`` on the official ``Sam3Image`` with the tiny exports' weights (:data:`SEED`):
    the vision and text backbones in ``SAM3VLBackbone``, the tokenizer with CLIP's vocabulary at ``vocab``, every
    query kept (confidence threshold 0)."""
    from sam3.model.sam3_image_processor import Sam3Processor as OfficialProcessor
    from sam3.model.tokenizer_ve import SimpleTokenizer

    from vitdeploy.models.recipes import load_recipe
    from vitdeploy.models.sam3_detector import Sam3DetectorArch, load_sam3_detector
    from vitdeploy.models.sam3_text_encoder import Sam3TextArch, load_sam3_text
    from vitdeploy.models.sam3_vision_encoder import Sam3VisionArch, load_sam3_vision

    backbone = load_sam3_vision(Sam3VisionArch.from_dict(load_recipe(RECIPES["vision"]).architecture), random_seed=SEED)
    text = load_sam3_text(Sam3TextArch.from_dict(load_recipe(RECIPES["text"]).architecture), random_seed=SEED)
    text.tokenizer = SimpleTokenizer(bpe_path=str(vocab))
    backbone.language_backbone = text
    model = load_sam3_detector(Sam3DetectorArch.from_dict(load_recipe(RECIPES["detector"]).architecture),
                               random_seed=SEED)
    model.backbone = backbone
    return OfficialProcessor(model.eval(), resolution=112, device="cpu", confidence_threshold=0.0)


def openvino_runs(path: Path, policy: str) -> bool:
    """Whether OpenVINO runs ``policy`` on this CPU (it reads back the inference precision asked for), else the test
    that needs it skips."""
    pytest.importorskip("openvino")
    from vitdeploy.runtime.backends.base import RunnerOptions
    from vitdeploy.runtime.backends.openvino_runner import OpenVinoRunner
    from vitdeploy.runtime_facts import PROVEN_POLICIES

    runner = OpenVinoRunner.from_options(path, RunnerOptions(threads=1, policy=policy))
    return runner.inference_precision == PROVEN_POLICIES[policy]["openvino_precision"]


def at_proven_policy(paths, policy: str, threads: int = 2) -> list:
    """Each file on OpenVINO at ``policy`` where its family is proven for it (``proven_policies``), else as written:
    what the first-use probe may choose for each on a CPU with the policy's units."""
    from vitdeploy.metadata import read_onnx_metadata
    from vitdeploy.runtime.deploy.loader import open_runner
    from vitdeploy.runtime_facts import PROVEN_POLICIES

    return [open_runner(path, runtime="openvino", threads=threads,
                        precision=policy if read_onnx_metadata(path)["family"] in PROVEN_POLICIES[policy]["families"]
                        else "file") for path in paths]


def pooled_rel_l2(want: list[np.ndarray], got: list[np.ndarray]) -> float:
    """The relative L2 distance of ``got`` from ``want``, each list's arrays pooled into one."""
    a = np.concatenate([np.asarray(x, np.float64).ravel() for x in want])
    b = np.concatenate([np.asarray(x, np.float64).ravel() for x in got])
    return float(np.linalg.norm(b - a) / np.linalg.norm(a))


__all__ = ["RECIPES", "SEED", "at_proven_policy", "official_sam3_processor", "openvino_runs", "pooled_rel_l2", "sam3_tiny_files", "sam3_tiny_files_with_vocab", "sam3_tiny_interactive_file"]
