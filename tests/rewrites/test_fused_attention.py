"""Folded rel-pos attention (FusedAttention) and the ONNX Runtime GELU form compute the official numbers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.conftest import TINY_ARCHS, tiny_encoder
from vitdeploy.errors import ExportError, InputError
from vitdeploy.models.sam_encoder import official_encoder_at_size
from vitdeploy.rewrites import rewrite_sam_image_encoder
from vitdeploy.rewrites.fused_attention import FusedAttention, fuse_sam_attention, key_onehot
from vitdeploy.rewrites.gelu import ErfGelu, fusable_gelu
from vitdeploy.rewrites.sam_encoder import ExportableAttention

#: Same limit as the other rewrites: max-abs error relative to max |official output|.
REWRITE_MAX_ABS_REL = 1e-5

CASES = [("padded_windows", None), ("padded_windows", 48), ("even_windows", None), ("all_global", None), ("all_global", 24)]
KERNELS = [("sdpa", False), ("sdpa", True), ("ort_mha", False)]


def _max_abs_rel(ref: torch.Tensor, out: torch.Tensor) -> float:
    return float((ref - out).abs().max() / ref.abs().max())


@pytest.mark.parametrize(("kernel", "pad_value"), KERNELS)
@pytest.mark.parametrize(("arch", "size"), CASES)
def test_fused_attention_matches_official(arch: str, size: int | None, kernel: str, pad_value: bool) -> None:
    official = tiny_encoder(arch)
    fused = fuse_sam_attention(rewrite_sam_image_encoder(official, input_size=size), kernel, pad_value=pad_value)  # type: ignore[arg-type]
    reference = official_encoder_at_size(official, size) if size else official
    s = size or TINY_ARCHS[arch].img_size
    for seed in (0, 1):
        x = torch.randn(2, 3, s, s, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            err = _max_abs_rel(reference(x), fused(x))
        assert err <= REWRITE_MAX_ABS_REL, f"{arch}@{s} {kernel} pad={pad_value}: max-abs/scale {err:.3g}"


def test_augmented_product_is_scores_plus_rel_pos_bias() -> None:
    """q_aug . k_aug equals scale * q.k + the decomposed rel-pos term, for every query/key pair."""
    block = rewrite_sam_image_encoder(tiny_encoder("padded_windows")).blocks[1]  # the global block
    attn = block.attn
    assert isinstance(attn, ExportableAttention)
    fused = FusedAttention(attn)
    (h, w), heads, hd = attn.tokens_hw, attn.num_heads, attn.head_dim
    x = torch.randn(2, h, w, attn.dim, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        q, k, _ = attn.qkv(x).reshape(2, h * w, 3, heads, hd).unbind(2)  # B, N, heads, hd
        q_aug, k_aug = fused.augmented_qk(q, k)
        got = torch.einsum("bqnc,bknc->bnqk", q_aug, k_aug).reshape(-1, h * w, h * w)
        q_bh = q.transpose(1, 2).reshape(-1, h * w, hd)  # B*heads, N, hd
        k_bh = k.transpose(1, 2).reshape(-1, h * w, hd)
        want = (q_bh * attn.scale) @ k_bh.transpose(1, 2) + attn.rel_pos_bias(q_bh)
    assert q_aug.shape[-1] == hd + h + w
    assert _max_abs_rel(want, got) <= REWRITE_MAX_ABS_REL


def test_key_onehot_marks_row_and_column() -> None:
    table = key_onehot(4, 3, 5)
    assert table.shape == (15, 4 + 3 + 5)
    assert torch.all(table[:, :4] == 0)
    assert torch.all(table.sum(dim=1) == 2)
    for n in range(15):
        row, col = divmod(n, 5)
        assert table[n, 4 + row] == 1 and table[n, 4 + 3 + col] == 1


def test_fusing_keeps_names_and_never_mutates_the_rewritten_encoder() -> None:
    official = tiny_encoder()
    rewritten = rewrite_sam_image_encoder(official)
    before = {k: v.clone() for k, v in rewritten.state_dict().items()}
    fused = fuse_sam_attention(rewritten, "ort_mha")
    assert set(fused.state_dict()) == set(official.state_dict())
    fused.load_state_dict(official.state_dict(), strict=True)
    assert all(isinstance(b.attn, ExportableAttention) for b in rewritten.blocks)
    assert all(isinstance(b.attn, FusedAttention) for b in fused.blocks)
    assert all(torch.equal(before[k], v) for k, v in rewritten.state_dict().items())
    with torch.no_grad():
        fused.blocks[0].attn.qkv.weight.add_(1.0)
    assert torch.equal(before["blocks.0.attn.qkv.weight"], rewritten.state_dict()["blocks.0.attn.qkv.weight"])


def test_bad_inputs_are_refused() -> None:
    rewritten = rewrite_sam_image_encoder(tiny_encoder())
    with pytest.raises(InputError, match="unknown attention kernel 'flash'"):
        fuse_sam_attention(rewritten, "flash")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="takes the rewritten encoder"):
        fuse_sam_attention(tiny_encoder(), "sdpa")
    with pytest.raises(InputError, match="rewrites ExportableAttention"):
        FusedAttention(nn.Linear(4, 4))  # type: ignore[arg-type]


def test_erf_gelu_is_exact_gelu_and_only_replaces_exact_gelu() -> None:
    x = torch.linspace(-8, 8, 10001)
    assert _max_abs_rel(nn.GELU()(x), ErfGelu()(x)) <= 1e-6  # float32 rounding order only
    rewritten = rewrite_sam_image_encoder(tiny_encoder())
    swapped = fusable_gelu(rewritten)
    assert all(isinstance(b.mlp.act, ErfGelu) for b in swapped.blocks)
    assert all(type(b.mlp.act) is nn.GELU for b in rewritten.blocks)
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert _max_abs_rel(rewritten(x), swapped(x)) <= REWRITE_MAX_ABS_REL
    rewritten.blocks[0].mlp.act = nn.GELU(approximate="tanh")
    with pytest.raises(ExportError, match="exact nn.GELU"):
        fusable_gelu(rewritten)
