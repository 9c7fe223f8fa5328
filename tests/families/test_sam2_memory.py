"""SAM 2's video memory modules against the official ones: the rotary embedding in real arithmetic equals the
official complex one, and the fixed bank with a mask equals the official concatenation, wherever frames sit."""

from __future__ import annotations

import tomllib

import pytest
import torch

from tests.sam2_tiny import TINY_SAM2_VIDEO_RECIPE

pytest.importorskip("sam2", reason="the official sam2 package is not installed (scripts/test.sh installs it)")

#: float32 agreement of the rewrites with the official modules (measured 4e-7 relative)
REL_MAX = 1e-5


def model():
    from vitdeploy.models.sam2 import Sam2Arch, load_sam2

    return load_sam2(Sam2Arch.from_dict(tomllib.loads(TINY_SAM2_VIDEO_RECIPE)["architecture"]), random_seed=5)


def test_real_rotation_equals_the_official_complex_one() -> None:
    from sam2.modeling.position_encoding import apply_rotary_enc, compute_axial_cis

    from vitdeploy.rewrites.sam2_memory import rotate

    cis = compute_axial_cis(dim=32, end_x=8, end_y=8)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 2, 64, 32, generator=g), torch.randn(1, 2, 192, 32, generator=g)
    official_q, official_k = apply_rotary_enc(q, k, freqs_cis=cis, repeat_freqs_k=True)
    assert torch.allclose(rotate(q, cis.real, cis.imag), official_q, atol=1e-6)
    assert torch.allclose(rotate(k, cis.real.repeat(3, 1), cis.imag.repeat(3, 1)), official_k, atol=1e-6)


@pytest.mark.parametrize("frames,pointers", [([0], 0), ([2, 0], 3), ([1, 2, 0], 4)])
def test_masked_bank_equals_the_official_concatenation(frames: list[int], pointers: int) -> None:
    """Frames in any slots (the official order is the slots' order in use), pointers after them, the rest masked."""
    from vitdeploy.rewrites.sam2_memory import ExportableMemoryAttention

    sam2 = model()
    grid = int(sam2.sam_image_embedding_size)
    hw, slots = grid * grid, 3
    ours = ExportableMemoryAttention(sam2, (grid, grid), frame_slots=slots, pointer_slots=4).eval()
    per = ours.tokens_per_pointer
    g = torch.Generator().manual_seed(len(frames) + pointers)
    image = torch.randn(1, 256, grid, grid, generator=g)
    memory = torch.randn(1, ours.memory_tokens, 64, generator=g)
    memory_pos = torch.randn(1, ours.memory_tokens, 64, generator=g)
    mask = torch.zeros(1, ours.memory_tokens)
    used = [memory[0, s * hw:(s + 1) * hw] for s in frames]
    used_pos = [memory_pos[0, s * hw:(s + 1) * hw] for s in frames]
    for s in frames:
        mask[0, s * hw:(s + 1) * hw] = 1.0
    start = slots * hw
    mask[0, start:start + pointers * per] = 1.0
    used.append(memory[0, start:start + pointers * per])
    used_pos.append(memory_pos[0, start:start + pointers * per])
    raw = image.reshape(1, 256, hw).permute(2, 0, 1) - sam2.no_mem_embed.reshape(1, 1, 256)
    with torch.no_grad():
        official = sam2.memory_attention(curr=[raw], curr_pos=[ours.curr_pos.transpose(0, 1)],
                                         memory=torch.cat(used)[:, None], memory_pos=torch.cat(used_pos)[:, None],
                                         num_obj_ptr_tokens=pointers * per)
        official = official.permute(1, 2, 0).reshape(1, 256, grid, grid)
        out = ours(image, memory, memory_pos, mask)
    assert float((out - official).abs().max() / official.abs().max()) < REL_MAX
