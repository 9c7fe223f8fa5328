"""SAM 2's video memory against the official code: the rotary embedding in real arithmetic equals the official complex
one, and the memories the runtime chooses, encoded by the graph's module, equal the official memory conditioning."""

from __future__ import annotations

import pytest
import torch

from tests.sam2_video_fixtures import clip_arch

pytest.importorskip("sam2", reason="the official sam2 package is not installed (scripts/test.sh installs it)")

#: float32 agreement of the rewrites with the official modules (measured 4e-7 relative)
REL_MAX = 1e-5


def model():
    from vitdeploy.models.sam2 import load_sam2

    return load_sam2(clip_arch(), random_seed=5)


def test_real_rotation_equals_the_official_complex_one() -> None:
    from sam2.modeling.position_encoding import apply_rotary_enc, compute_axial_cis

    from vitdeploy.rewrites.rotary import deinterleave_order, rotate_halves

    cis = compute_axial_cis(dim=32, end_x=8, end_y=8)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 2, 64, 32, generator=g), torch.randn(1, 2, 192, 32, generator=g)
    official_q, official_k = apply_rotary_enc(q, k, freqs_cis=cis, repeat_freqs_k=True)
    halves = deinterleave_order(1, 32)  # one head's channels, pairs in halves, in and out
    assert torch.allclose(rotate_halves(q[..., halves], cis.real, cis.imag), official_q[..., halves], atol=1e-6)
    assert torch.allclose(rotate_halves(k[..., halves], cis.real.repeat(3, 1), cis.imag.repeat(3, 1)),
                          official_k[..., halves], atol=1e-6)
    assert deinterleave_order(2, 4).tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


@pytest.mark.parametrize("heads,kv_in", [(1, 16), (2, 16), (2, 64)])
def test_attention_equals_the_official_rope_attention(heads: int, kv_in: int) -> None:
    """``RealRoPEAttention`` (channels in halves; the bank's values weighted before ``v_proj`` where they are narrower
    than a head, as with 1 and 2 heads of 32 over 16 channels, and after it where not, 64 channels) against the official
    ``RoPEAttention``: self-attention, and cross-attention to 3 frames of keys plus 5 unrotated pointer tokens."""
    from sam2.modeling.position_encoding import compute_axial_cis
    from sam2.modeling.sam.transformer import RoPEAttention

    from vitdeploy.rewrites.sam2_memory import RealRoPEAttention

    torch.manual_seed(heads * 100 + kv_in)
    dim, grid = 32 * heads, 8
    cis = compute_axial_cis(dim=32, end_x=grid, end_y=grid, theta=10000.0)
    official_self = RoPEAttention(dim, heads, 1, rope_theta=10000.0, feat_sizes=(grid, grid)).eval()
    official_cross = RoPEAttention(dim, heads, 1, rope_theta=10000.0, rope_k_repeat=True, feat_sizes=(grid, grid),
                                   kv_in_dim=kv_in).eval()
    mine_self, mine_cross = RealRoPEAttention(official_self), RealRoPEAttention(official_cross)
    assert mine_cross.values_in_bank_width == (kv_in < 32)
    q = torch.randn(1, grid * grid, dim)
    frames, frame_values = torch.randn(1, 3 * grid * grid, kv_in), torch.randn(1, 3 * grid * grid, kv_in)
    pointers, pointer_values = torch.randn(1, 5, kv_in), torch.randn(1, 5, kv_in)
    with torch.no_grad():
        theirs = official_self(q, q, q)
        mine = mine_self(q, q, q, cis.real, cis.imag)
        assert float((mine - theirs).abs().max() / theirs.abs().max()) < REL_MAX
        theirs = official_cross(q, torch.cat([frames, pointers], 1), torch.cat([frame_values, pointer_values], 1),
                                num_k_exclude_rope=5)
        mine = mine_cross(q, frames, frame_values, cis.real, cis.imag, pointers, pointer_values)
        assert float((mine - theirs).abs().max() / theirs.abs().max()) < REL_MAX


#: (frame, prompted frames, tracked frames, video length, reverse, stride, max prompted frames in attention)
BANKS = {
    "forward": (9, [0, 5], [1, 2, 3, 4, 6, 7, 8], 30, False, 1, -1),
    "reverse": (3, [12, 0], [4, 5, 6, 7, 8, 9, 10, 11], 30, True, 1, -1),
    "stride 2, closest 2 prompted": (14, [0, 6, 20, 25], [8, 9, 10, 11, 12, 13], 30, False, 2, 2),
    "short video": (5, [0], [1, 2, 3, 4], 8, False, 1, -1),
    "prompted later, no pointer": (2, [10], [], 30, False, 1, -1),
}


@pytest.mark.parametrize("case", list(BANKS))
def test_bank_and_graph_equal_the_official_memory_conditioning(case: str) -> None:
    """The runtime's choice of memories (select_memory) and the graph's encodings of them (ExportableMemoryAttention)
    against ``SAM2Base._prepare_memory_conditioned_features`` over the same stored outputs."""
    from sam2.modeling.sam2_base import SAM2Base

    from vitdeploy.rewrites.sam2_memory import ExportableMemoryAttention, tracker_settings
    from vitdeploy.runtime.apps.sam2.memory_bank import TrackerSettings, select_memory

    frame, prompted, tracked, length, reverse, stride, max_cond = BANKS[case]
    sam2 = model()
    sam2.memory_temporal_stride_for_eval, sam2.max_cond_frames_in_attn = stride, max_cond
    grid, c = int(sam2.sam_image_embedding_size), int(sam2.hidden_dim)
    g = torch.Generator().manual_seed(frame)
    theirs: dict[str, dict] = {"cond_frame_outputs": {}, "non_cond_frame_outputs": {}}
    ours: dict[str, dict] = {"cond_frame_outputs": {}, "non_cond_frame_outputs": {}}
    with torch.no_grad():
        for key, frames in (("cond_frame_outputs", prompted), ("non_cond_frame_outputs", tracked)):
            for t in frames:
                features = torch.randn(1, 64, grid, grid, generator=g).to(torch.bfloat16).float()  # stored in bf16
                token = torch.randn(1, c, generator=g)
                presence = float(t % 3 != 1)
                pointer = sam2.obj_ptr_proj(token)  # _forward_sam_heads' pointer (fixed_no_obj_ptr)
                pointer = presence * pointer + (1 - presence) * sam2.no_obj_ptr
                theirs[key][t] = {"maskmem_features": features, "obj_ptr": pointer,
                                  "maskmem_pos_enc": [sam2.memory_encoder.position_encoding(features)]}
                ours[key][t] = {"maskmem_features": features.numpy(), "obj_token": token[0].numpy(),
                                "obj_presence": presence}
        image = torch.randn(1, c, grid, grid, generator=g)
        raw = image.flatten(2).permute(2, 0, 1) - sam2.no_mem_embed.reshape(1, 1, c)
        pos = sam2.image_encoder.neck.position_encoding(image).flatten(2).permute(2, 0, 1)
        official = SAM2Base._prepare_memory_conditioned_features(
            sam2, frame_idx=frame, is_init_cond_frame=False, current_vision_feats=[raw], current_vision_pos_embeds=[pos],
            feat_sizes=[(grid, grid)], output_dict=theirs, num_frames=length, track_in_reverse=reverse)
        bank = select_memory(frame, ours, TrackerSettings.from_metadata(tracker_settings(sam2)), length, reverse)
        feeds = {k: torch.from_numpy(v) for k, v in bank.feeds().items()}
        mine = ExportableMemoryAttention(sam2, (grid, grid)).eval()(image, **feeds)
    assert len(bank.frames) >= 1 and (len(bank.pointers) == 0) == (case == "prompted later, no pointer")
    assert float((mine - official).abs().max() / official.abs().max()) < REL_MAX, case
