"""The eager reference: the official ``segment_anything`` PromptEncoder + MaskDecoder, built from a recipe.

The two modules live in a small container whose attribute names are those of ``Sam``
(``prompt_encoder``, ``mask_decoder``), so the keys of a full SAM checkpoint load unchanged.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from vitdeploy.errors import CheckpointError, InputError
from vitdeploy.models.checkpoints import check_fits, load_state_dict_file, without_data_parallel_prefix
from vitdeploy.models.sam_arch import SamDecoderArch
from vitdeploy.models.random_weights import randomize_parameters

#: Key prefixes of the prompt encoder and mask decoder in an official full-SAM checkpoint.
DECODER_PREFIXES = ("prompt_encoder.", "mask_decoder.")


class SamPromptDecoder(nn.Module):
    """Container of the official ``PromptEncoder`` and ``MaskDecoder`` under ``Sam``'s attribute names."""

    def __init__(self, prompt_encoder: nn.Module, mask_decoder: nn.Module):
        super().__init__()
        self.prompt_encoder = prompt_encoder
        self.mask_decoder = mask_decoder


def build_sam_prompt_decoder(arch: SamDecoderArch) -> SamPromptDecoder:
    """Build the official prompt encoder and mask decoder exactly as ``_build_sam`` does, in eval mode."""
    from segment_anything.modeling import MaskDecoder, PromptEncoder, TwoWayTransformer

    emb = (arch.image_embedding_size, arch.image_embedding_size)
    prompt_encoder = PromptEncoder(
        embed_dim=arch.embed_dim,
        image_embedding_size=emb,
        input_image_size=(arch.input_image_size, arch.input_image_size),
        mask_in_chans=arch.mask_in_chans,
    )
    mask_decoder = MaskDecoder(
        num_multimask_outputs=arch.num_multimask_outputs,
        transformer=TwoWayTransformer(
            depth=arch.transformer_depth,
            embedding_dim=arch.embed_dim,
            mlp_dim=arch.transformer_mlp_dim,
            num_heads=arch.transformer_num_heads,
            attention_downsample_rate=arch.attention_downsample_rate,
        ),
        transformer_dim=arch.embed_dim,
        iou_head_depth=arch.iou_head_depth,
        iou_head_hidden_dim=arch.iou_head_hidden_dim,
    )
    return SamPromptDecoder(prompt_encoder, mask_decoder).eval()


def randomize_prompt_decoder(module: nn.Module, seed: int) -> nn.Module:
    """Seeded non-zero random parameters, and a seeded positional-encoding buffer, in place.

    The official ``PositionEmbeddingRandom`` draws its Gaussian matrix (a persistent buffer) from the
    global RNG at construction; it is redrawn here from ``seed`` (scale 1, as official) so that a
    random-weight model can be rebuilt bit for bit in another process.
    """
    randomize_parameters(module, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, buf in sorted(module.named_buffers()):
            if name.endswith("positional_encoding_gaussian_matrix"):
                buf.copy_(torch.randn(buf.shape, generator=gen, dtype=torch.float32))
    return module


def select_decoder_keys(state: dict[str, torch.Tensor], path: str | Path) -> dict[str, torch.Tensor]:
    """Keep the ``prompt_encoder.*`` and ``mask_decoder.*`` keys of a full SAM checkpoint."""
    kept = {k: v for k, v in without_data_parallel_prefix(state).items() if k.startswith(DECODER_PREFIXES)}
    if not kept:
        raise CheckpointError(
            f"checkpoint '{path}' holds no prompt_encoder.* / mask_decoder.* keys: pass a full SAM checkpoint "
            "(e.g. sam_vit_b_01ec64.pth), not an encoder-only one"
        )
    return kept


def load_sam_prompt_decoder(
    arch: SamDecoderArch,
    checkpoint: str | Path | None = None,
    *,
    random_seed: int | None = None,
    what: str = "the SAM prompt encoder and mask decoder",
) -> SamPromptDecoder:
    """Build the official prompt encoder + mask decoder and fill them from a checkpoint or a seed.

    Exactly one of ``checkpoint`` and ``random_seed`` must be given. Checkpoints are read with
    :func:`vitdeploy.models.checkpoints.load_state_dict_file` (weights only, or safetensors).
    """
    if (checkpoint is None) == (random_seed is None):
        raise ValueError("give exactly one of checkpoint and random_seed")
    model = build_sam_prompt_decoder(arch)
    if checkpoint is None:
        return randomize_prompt_decoder(model, random_seed).eval()
    state = select_decoder_keys(load_state_dict_file(checkpoint), checkpoint)
    check_fits(model, state, what, hint=": choose the matching --recipe")
    model.load_state_dict(state, strict=True)
    return model.eval()


class OfficialDecoderReference(nn.Module):
    """The decoder graph's contract computed by the official ``PromptEncoder.forward`` and ``MaskDecoder``.

    Inputs use the graph's layout (points, then a padding point or one box's two corners); they are
    turned back into the official call: ``points`` without the padding point (the official encoder adds
    it itself when there is no box), ``boxes``, and ``masks`` only when ``has_mask_input`` is set.
    """

    def __init__(self, prompt_encoder: nn.Module, mask_decoder: nn.Module, mask_slice: tuple[int, int]):
        super().__init__()
        self.prompt_encoder = prompt_encoder
        self.mask_decoder = mask_decoder
        self.mask_slice = mask_slice

    def forward(self, image_embeddings: torch.Tensor, point_coords: torch.Tensor, point_labels: torch.Tensor,
                mask_input: torch.Tensor, has_mask_input: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        labels = point_labels[0]
        n_box = int((labels == 2).sum())
        if n_box > 1:
            raise InputError("the official SamPredictor takes one box per prompt; these inputs hold several")
        if n_box:
            if labels[-2:].tolist() != [2.0, 3.0]:
                raise InputError("box corners (labels 2, 3) must be the last two points")
            boxes = point_coords[:, -2:].reshape(1, 4)
            coords, labs = point_coords[:, :-2], point_labels[:, :-2]
        else:
            if float(labels[-1]) != -1.0:
                raise InputError("without a box the last point must be the padding point (label -1)")
            boxes, coords, labs = None, point_coords[:, :-1], point_labels[:, :-1]
        points = (coords, labs) if coords.shape[1] else None
        if points is None and boxes is None:
            raise InputError("no prompt: the inputs hold neither points nor a box")
        masks = mask_input if float(has_mask_input.reshape(-1)[0]) > 0.5 else None
        sparse, dense = self.prompt_encoder(points=points, boxes=boxes, masks=masks)
        masks_out, iou = self.mask_decoder.predict_masks(
            image_embeddings=image_embeddings, image_pe=self.prompt_encoder.get_dense_pe(),
            sparse_prompt_embeddings=sparse, dense_prompt_embeddings=dense,
        )
        start, stop = self.mask_slice
        return masks_out[:, start:stop], iou[:, start:stop]
