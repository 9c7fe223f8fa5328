"""The export-friendly prompt encoder + mask decoder vs the official modules (eager), loading, recipes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.sam_tiny import DECODER_ARCH, tiny_decoder
from vitdeploy.errors import CheckpointError, ExportError, InputError
from vitdeploy.models.recipes import load_recipe
from vitdeploy.models.sam_decoder import SamDecoderArch, build_sam_prompt_decoder, load_sam_prompt_decoder
from vitdeploy.rewrites.sam_decoder import rewrite_sam_decoder
from vitdeploy.parity import TOLERANCES, compare

FP32 = TOLERANCES["fp32"]
S = DECODER_ARCH.input_image_size


def _prompts(kind: str, gen: torch.Generator):
    """Official-call prompts and the same prompts in the graph layout (points, then padding or box corners)."""
    pts = torch.rand(1, 3, 2, generator=gen) * S
    lab = torch.tensor([[1, 0, 1]])
    box = torch.tensor([[4.0, 6.0, 50.0, 40.0]])
    if kind == "points":
        official = dict(points=(pts, lab), boxes=None)
        coords, labels = torch.cat([pts, torch.zeros(1, 1, 2)], 1), torch.tensor([[1.0, 0.0, 1.0, -1.0]])
    elif kind == "box":
        official = dict(points=None, boxes=box)
        coords, labels = box.reshape(1, 2, 2), torch.tensor([[2.0, 3.0]])
    else:
        official = dict(points=(pts, lab), boxes=box)
        coords, labels = torch.cat([pts, box.reshape(1, 2, 2)], 1), torch.tensor([[1.0, 0.0, 1.0, 2.0, 3.0]])
    return official, coords, labels


@pytest.mark.parametrize("layernorm2d", ["matmul", "native"])
@pytest.mark.parametrize("kind", ["points", "box", "points_box"])
@pytest.mark.parametrize("with_mask", [False, True])
def test_rewrite_matches_official(kind: str, with_mask: bool, layernorm2d: str) -> None:
    official = tiny_decoder()
    pe, md = official.prompt_encoder, official.mask_decoder
    rewritten = rewrite_sam_decoder(pe, md, layernorm2d=layernorm2d)
    gen = torch.Generator().manual_seed(1)
    emb = torch.randn(1, 16, 8, 8, generator=gen)
    mask = 3 * torch.randn(1, 1, 32, 32, generator=gen)
    call, coords, labels = _prompts(kind, gen)
    with torch.no_grad():
        sparse, dense = pe(masks=mask if with_mask else None, **call)
        ref_masks, ref_iou = md.predict_masks(emb, pe.get_dense_pe(), sparse, dense)
        masks, iou = rewritten(emb, coords, labels, mask, torch.tensor([1.0 if with_mask else 0.0]))
    for label, ref, out in (("masks", ref_masks, masks), ("iou", ref_iou, iou)):
        result = compare(ref, out, FP32, label=f"{kind}/{label}")
        assert result, result.summary()


@pytest.mark.parametrize("mask_output,official_multimask", [("multimask", True), ("single", False)])
def test_static_mask_selection_matches_official_forward(mask_output: str, official_multimask: bool) -> None:
    official = tiny_decoder()
    pe, md = official.prompt_encoder, official.mask_decoder
    rewritten = rewrite_sam_decoder(pe, md, mask_output=mask_output)
    gen = torch.Generator().manual_seed(2)
    emb = torch.randn(1, 16, 8, 8, generator=gen)
    call, coords, labels = _prompts("points", gen)
    with torch.no_grad():
        sparse, dense = pe(masks=None, **call)
        ref_masks, ref_iou = md(emb, pe.get_dense_pe(), sparse, dense, multimask_output=official_multimask)
        masks, iou = rewritten(emb, coords, labels, torch.zeros(1, 1, 32, 32), torch.zeros(1))
    assert masks.shape == ref_masks.shape and iou.shape == ref_iou.shape
    assert compare(ref_masks, masks, FP32) and compare(ref_iou, iou, FP32)


def test_rewrite_leaves_the_official_modules_untouched() -> None:
    official = tiny_decoder()
    before = {k: v.clone() for k, v in official.state_dict().items()}
    rewritten = rewrite_sam_decoder(official.prompt_encoder, official.mask_decoder)
    with torch.no_grad():
        for p in rewritten.parameters():
            p.add_(1.0)
    after = official.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert set(rewritten.state_dict()) == set(before)  # official names, nothing added


def test_rewrite_refuses_unknown_modules() -> None:
    official = tiny_decoder()
    with pytest.raises(ExportError, match="PromptEncoder"):
        rewrite_sam_decoder(torch.nn.Linear(2, 2), official.mask_decoder)
    with pytest.raises(InputError, match="mask output"):
        rewrite_sam_decoder(official.prompt_encoder, official.mask_decoder, mask_output="best")  # type: ignore[arg-type]


def test_random_weights_are_seeded_and_nonzero() -> None:
    a, b, c = tiny_decoder(0), tiny_decoder(0), tiny_decoder(1)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["prompt_encoder.pe_layer.positional_encoding_gaussian_matrix"],
                           sc["prompt_encoder.pe_layer.positional_encoding_gaussian_matrix"])
    for name, p in a.named_parameters():
        assert bool((p != 0).all()), f"{name} has zeros: a code path could be skipped"


def test_full_sam_checkpoint_loads_and_bad_ones_are_refused(tmp_path: Path) -> None:
    source = tiny_decoder(7)
    state = dict(source.state_dict())
    state["image_encoder.patch_embed.proj.weight"] = torch.ones(2)  # a full SAM checkpoint holds the encoder too
    path = tmp_path / "sam_tiny.pth"
    torch.save(state, path)
    loaded = load_sam_prompt_decoder(DECODER_ARCH, path)
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in source.state_dict().items())

    encoder_only = tmp_path / "encoder_only.pth"
    torch.save({"patch_embed.proj.weight": torch.ones(2)}, encoder_only)
    with pytest.raises(CheckpointError, match="no prompt_encoder"):
        load_sam_prompt_decoder(DECODER_ARCH, encoder_only)
    wider = SamDecoderArch(**{**DECODER_ARCH.to_dict(), "embed_dim": 32, "iou_head_hidden_dim": 32})
    with pytest.raises(CheckpointError, match="does not fit"):
        load_sam_prompt_decoder(wider, path)


@pytest.mark.parametrize("variant", ["b", "l", "h"])
def test_decoder_recipes_build_the_official_architecture(variant: str) -> None:
    """The shipped decoder recipes read back as the modules segment_anything.build_sam_vit_* builds."""
    from segment_anything.modeling import MaskDecoder, PromptEncoder, TwoWayTransformer

    arch = SamDecoderArch.from_recipe(load_recipe(f"sam_vit_{variant}_decoder"))
    official_pe = PromptEncoder(embed_dim=256, image_embedding_size=(64, 64), input_image_size=(1024, 1024), mask_in_chans=16)
    official_md = MaskDecoder(num_multimask_outputs=3, transformer=TwoWayTransformer(depth=2, embedding_dim=256, mlp_dim=2048,
                              num_heads=8), transformer_dim=256, iou_head_depth=3, iou_head_hidden_dim=256)
    assert SamDecoderArch.from_modules(official_pe, official_md) == arch
    built = build_sam_prompt_decoder(arch).state_dict()
    official = {**{f"prompt_encoder.{k}": v for k, v in official_pe.state_dict().items()},
                **{f"mask_decoder.{k}": v for k, v in official_md.state_dict().items()}}
    assert {k: tuple(v.shape) for k, v in built.items()} == {k: tuple(v.shape) for k, v in official.items()}


def test_decoder_at_another_input_size() -> None:
    assert DECODER_ARCH.at_input_size(32).image_embedding_size == 4
    with pytest.raises(InputError, match="multiple of the encoder patch size 8"):
        DECODER_ARCH.at_input_size(36)
