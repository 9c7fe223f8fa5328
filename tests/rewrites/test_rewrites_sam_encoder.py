"""The rewritten SAM encoder computes the official module's numbers with the official weights."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from segment_anything.modeling.common import LayerNorm2d
from segment_anything.modeling.image_encoder import get_rel_pos

from tests.conftest import TINY_ARCHS, tiny_encoder
from vitdeploy.errors import ExportError, InputError
from vitdeploy.models.sam_encoder import official_encoder_at_size
from vitdeploy.rewrites import MatMulLayerNorm2d, NativeLayerNorm2d, rewrite_sam_image_encoder
from vitdeploy.rewrites.static_shapes import bicubic_resample_matrix, rel_pos_gather_matrix

#: Rewrite vs official, max-abs error relative to the output's scale (max |reference|).
REWRITE_MAX_ABS_REL = 1e-5


def _max_abs_rel(ref: torch.Tensor, out: torch.Tensor) -> float:
    return float((ref - out).abs().max() / ref.abs().max())


CASES = [
    ("padded_windows", None),
    ("padded_windows", 48),  # smaller export size: pos-embed resampled, rel-pos tables interpolated
    ("padded_windows", 96),  # larger export size
    ("even_windows", None),
    ("even_windows", 40),
    ("all_global", None),
    ("all_global", 24),
]


@pytest.mark.parametrize("layernorm2d", ["matmul", "native"])
@pytest.mark.parametrize(("arch", "size"), CASES)
def test_rewrite_matches_official(arch: str, size: int | None, layernorm2d: str) -> None:
    official = tiny_encoder(arch)
    rewritten = rewrite_sam_image_encoder(official, input_size=size, layernorm2d=layernorm2d)
    reference = official_encoder_at_size(official, size) if size else official
    s = size or TINY_ARCHS[arch].img_size
    for seed in (0, 1):
        x = torch.randn(2, 3, s, s, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            ref, out = reference(x), rewritten(x)
        assert out.shape == ref.shape
        err = _max_abs_rel(ref, out)
        assert err <= REWRITE_MAX_ABS_REL, f"{arch}@{s} {layernorm2d}: max-abs/scale {err:.3g} > {REWRITE_MAX_ABS_REL}"


def test_rewrite_keeps_names_and_never_mutates_the_original() -> None:
    official = tiny_encoder()
    before = {k: v.clone() for k, v in official.state_dict().items()}
    params_before = {k: id(p) for k, p in official.named_parameters()}
    rewritten = rewrite_sam_image_encoder(official, input_size=48)
    # Same names and tensors: strict loading works both ways.
    assert set(rewritten.state_dict()) == set(official.state_dict())
    rewritten.load_state_dict(official.state_dict(), strict=True)
    copy.deepcopy(official).load_state_dict(rewritten.state_dict(), strict=True)
    # The original is untouched: same parameter objects, same values, no new buffers.
    assert {k: id(p) for k, p in official.named_parameters()} == params_before
    assert all(torch.equal(before[k], v) for k, v in official.state_dict().items())
    assert official.pos_embed.shape[1] == TINY_ARCHS["padded_windows"].img_size // 8
    # The copy does not share storage with the original.
    assert rewritten.pos_embed.data_ptr() != official.pos_embed.data_ptr()


def test_rewrite_follows_the_weights_loaded_into_it() -> None:
    """Precomputed tables are index/interpolation maps, not weights: new weights take effect."""
    rewritten = rewrite_sam_image_encoder(tiny_encoder(seed=0), input_size=48)
    other = tiny_encoder(seed=5)
    rewritten.load_state_dict(other.state_dict(), strict=True)
    x = torch.randn(1, 3, 48, 48)
    with torch.no_grad():
        err = _max_abs_rel(official_encoder_at_size(other, 48)(x), rewritten(x))
    assert err <= REWRITE_MAX_ABS_REL


@pytest.mark.parametrize(("q", "table_len"), [(8, 15), (6, 15), (12, 15), (3, 5)])
def test_rel_pos_matrix_is_get_rel_pos(q: int, table_len: int) -> None:
    table = torch.randn(table_len, 7)
    expected = get_rel_pos(q, q, table)
    got = (rel_pos_gather_matrix(q, q, table_len) @ table).reshape(q, q, 7)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize(("src", "dst"), [(8, 6), (8, 12), (64, 32), (5, 5)])
def test_bicubic_matrix_is_interpolate(src: int, dst: int) -> None:
    pos = torch.randn(1, 4, src, src)
    expected = F.interpolate(pos, size=(dst, dst), mode="bicubic", align_corners=False)
    a = bicubic_resample_matrix(src, dst)
    torch.testing.assert_close(a @ pos @ a.t(), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("cls", [MatMulLayerNorm2d, NativeLayerNorm2d])
def test_layernorm2d_rewrites_match_official(cls: type) -> None:
    official = LayerNorm2d(12, eps=1e-6)
    with torch.no_grad():
        official.weight.copy_(torch.randn(12))
        official.bias.copy_(torch.randn(12))
    new = cls(12, 5, 7, eps=1e-6) if cls is MatMulLayerNorm2d else cls(12, eps=1e-6)
    new.load_state_dict(official.state_dict(), strict=True)
    x = 3 + 10 * torch.randn(2, 12, 5, 7)
    torch.testing.assert_close(new(x), official(x), rtol=0, atol=2e-5)


@pytest.mark.parametrize("size", [50, 7, 0])
def test_size_not_multiple_of_patch_is_refused(size: int) -> None:
    with pytest.raises(InputError, match="multiple of the patch size"):
        rewrite_sam_image_encoder(tiny_encoder(), input_size=size)


def test_unknown_module_raises_instead_of_being_skipped() -> None:
    official = tiny_encoder()
    official.blocks[1] = torch.nn.Identity()
    with pytest.raises(ExportError, match="blocks.1"):
        rewrite_sam_image_encoder(official)
    with pytest.raises(ExportError, match="ImageEncoderViT"):
        rewrite_sam_image_encoder(torch.nn.Linear(2, 2))



def _qkv_proj_flops(module: torch.nn.Module, x: torch.Tensor, dim: int) -> int:
    """FLOPs of the GEMMs with a (dim, 3*dim) or (dim, dim) right operand: the qkv and proj projections."""
    from torch.utils._python_dispatch import TorchDispatchMode

    total = 0

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            nonlocal total
            if func in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
                a, b = args[-2], args[-1]
                if tuple(b.shape) in ((dim, 3 * dim), (dim, dim)):
                    total += 2 * a.shape[0] * a.shape[1] * b.shape[1]
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Count():
        module(x)
    return total


@pytest.mark.parametrize("arch", ["padded_windows", "even_windows"])
def test_windowed_blocks_skip_the_padding_in_qkv_and_proj(arch: str) -> None:
    """qkv/proj of the rewrite run on the real tokens: the official's extra work is exactly the padded rows."""
    official = tiny_encoder(arch)
    rewritten = rewrite_sam_image_encoder(official)
    a = TINY_ARCHS[arch]
    grid = a.img_size // a.patch_size
    padded = -(-grid // a.window_size) * a.window_size
    windowed = a.depth - len(a.global_attn_indexes)
    batch, dim = 2, a.embed_dim
    # Per padded token: qkv (dim x 3dim) and proj (dim x dim) multiply-adds, 2 FLOPs each.
    expected_saving = batch * windowed * (padded**2 - grid**2) * 2 * (dim * 3 * dim + dim * dim)
    x = torch.randn(batch, 3, a.img_size, a.img_size, generator=torch.Generator().manual_seed(0))
    official_flops = _qkv_proj_flops(official, x, dim)
    saving = official_flops - _qkv_proj_flops(rewritten, x, dim)
    assert official_flops > 0
    assert saving == expected_saving, f"{arch}: saved {saving} FLOPs, padding accounts for {expected_saving}"
    assert (saving > 0) == (padded != grid)
