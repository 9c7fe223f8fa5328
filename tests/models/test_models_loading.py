"""Checkpoint loading: every supported layout loads the same weights; bad files get clear errors."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tests.conftest import TINY_ARCHS, tiny_encoder
from vitdeploy.errors import CheckpointError, RecipeError
from vitdeploy.models.recipes import load_recipe, recipe_names
from vitdeploy.models.sam_encoder import SamEncoderArch, load_sam_image_encoder

ARCH = TINY_ARCHS["padded_windows"]


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_full_sam_checkpoint_loads_image_encoder_keys(tiny_checkpoint: Path) -> None:
    loaded = load_sam_image_encoder(ARCH, tiny_checkpoint)
    assert _same_weights(loaded, tiny_encoder(seed=3))


@pytest.mark.parametrize("layout", ["encoder_only", "nested_model", "dataparallel", "safetensors"])
def test_other_layouts_load(tmp_path: Path, layout: str) -> None:
    source = tiny_encoder(seed=4)
    state = source.state_dict()
    if layout == "safetensors":
        path = tmp_path / "enc.safetensors"
        save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    else:
        path = tmp_path / "enc.pth"
        if layout == "nested_model":  # training scripts (e.g. MedSAM fine-tunes) wrap the state dict
            obj: object = {"model": {f"image_encoder.{k}": v for k, v in state.items()}, "epoch": 3}
        elif layout == "dataparallel":
            obj = {f"module.image_encoder.{k}": v for k, v in state.items()}
        else:
            obj = state
        torch.save(obj, path)
    assert _same_weights(load_sam_image_encoder(ARCH, path), source)


def test_missing_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not found"):
        load_sam_image_encoder(ARCH, tmp_path / "nope.pth")


@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_corrupt_checkpoint(tmp_path: Path, tiny_checkpoint: Path, suffix: str) -> None:
    path = tmp_path / f"broken{suffix}"
    path.write_bytes(tiny_checkpoint.read_bytes()[:500])
    with pytest.raises(CheckpointError, match="corrupt|not a readable"):
        load_sam_image_encoder(ARCH, path)


class _RunsCode:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_pickle_that_runs_code_is_refused_and_does_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pth"
    torch.save({"patch_embed.proj.weight": torch.zeros(1), "payload": _RunsCode(marker)}, path)
    with pytest.raises(CheckpointError, match="could run code"):
        load_sam_image_encoder(ARCH, path)
    assert not marker.exists()
    # A raw pickle (not a torch zip) is refused the same way.
    raw = tmp_path / "evil_raw.pth"
    raw.write_bytes(pickle.dumps(_RunsCode(marker), protocol=2))
    with pytest.raises(CheckpointError):
        load_sam_image_encoder(ARCH, raw)
    assert not marker.exists()


def test_checkpoint_of_another_variant_names_keys_and_shapes(tmp_path: Path) -> None:
    other = SamEncoderArch(img_size=64, patch_size=8, embed_dim=48, depth=4, num_heads=2, out_chans=16,
                           window_size=3, global_attn_indexes=(1,))
    path = tmp_path / "other.pth"
    torch.save(load_sam_image_encoder(other, random_seed=0).state_dict(), path)
    with pytest.raises(CheckpointError) as info:
        load_sam_image_encoder(ARCH, path)
    message = str(info.value)
    assert "patch_embed.proj.weight is [48, 3, 8, 8] in the checkpoint but [32, 3, 8, 8]" in message
    assert "unexpected blocks.3" in message and "embed_dim 48 (the recipe: 32), depth 4 (the recipe: 3)" in message


def test_a_safetensors_file_with_another_patch_size_is_told_so(tmp_path: Path) -> None:
    """The hint named embed_dim and depth (both matching) for a patch-size mismatch: it names what differs."""
    from safetensors.torch import save_file

    other = SamEncoderArch(img_size=64, patch_size=4, embed_dim=32, depth=3, num_heads=2, out_chans=16,
                           window_size=3, global_attn_indexes=(1,))
    path = tmp_path / "other.safetensors"
    save_file({k: v.contiguous() for k, v in load_sam_image_encoder(other, random_seed=0).state_dict().items()}, str(path))
    with pytest.raises(CheckpointError) as info:
        load_sam_image_encoder(ARCH, path)
    message = str(info.value)
    assert "the checkpoint has patch_size 4 (the recipe: 8)" in message, message
    assert "embed_dim 32" not in message and "depth 3" not in message, message


def test_random_weights_are_seeded_and_nonzero() -> None:
    a, b, c = tiny_encoder(seed=0), tiny_encoder(seed=0), tiny_encoder(seed=1)
    assert _same_weights(a, b) and not _same_weights(a, c)
    for name, p in a.named_parameters():
        assert bool((p != 0).all()), f"{name} has zeros: a code path could be skipped"


def test_shipped_recipes_match_official_builders() -> None:
    """The recipes build exactly the architectures of segment_anything.build_sam_vit_{b,l,h}."""
    from segment_anything.build_sam import _build_sam  # noqa: F401  (the builder these recipes mirror)

    expected = {"sam_vit_b": (768, 12, 12, (2, 5, 8, 11)), "sam_vit_l": (1024, 24, 16, (5, 11, 17, 23)),
                "sam_vit_h": (1280, 32, 16, (7, 15, 23, 31))}
    assert set(expected) <= set(recipe_names())
    for name, (dim, depth, heads, glob) in expected.items():
        arch = SamEncoderArch.from_recipe(load_recipe(name))
        assert (arch.embed_dim, arch.depth, arch.num_heads, arch.global_attn_indexes) == (dim, depth, heads, glob)
        assert (arch.img_size, arch.patch_size, arch.window_size, arch.out_chans) == (1024, 16, 14, 256)


def test_recipe_errors(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="not found"):
        load_recipe("sam_vit_q")
    bad = tmp_path / "bad.toml"
    bad.write_text("[model]\nfamily='sam_image_encoder'\nvariant='x'\n[architecture]\nembed_dims=3\n")
    with pytest.raises(RecipeError, match="unknown architecture keys"):
        SamEncoderArch.from_recipe(load_recipe(bad))
    bad.write_text("not = [toml")
    with pytest.raises(RecipeError, match="not valid TOML"):
        load_recipe(bad)
