"""The eager reference for SAM 2 / 2.1: the official ``sam2`` package's ``SAM2Base``, built from its own Hydra config.

A recipe's ``[architecture]`` names the official config (``configs/sam2.1/sam2.1_hiera_t.yaml``) and may add Hydra
overrides (``++model.image_encoder.trunk.embed_dim=16``: the tests' tiny model). Weights come from ``--checkpoint``
(an official ``sam2.1_hiera_*.pt``: ``{"model": state_dict}``, read with ``weights_only=True``) or are seeded random
(every parameter perturbed, so nothing is trivially zero); nothing is downloaded.

The ``sam2`` package is an sdist that needs PyTorch to build: ``SAM2_BUILD_CUDA=0 pip install --no-build-isolation
sam2 'antlr4-python3-runtime==4.9.3'`` (its optional CUDA post-processing left out; antlr 4.13 fails at import).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from vitdeploy.errors import RecipeError

SAM2_INSTALL_HINT = ("SAM2_BUILD_CUDA=0 pip install --no-build-isolation 'sam2==1.1.0' 'antlr4-python3-runtime==4.9.3' "
                     "(after PyTorch)")


@dataclass(frozen=True)
class Sam2Arch:
    """The official config and its Hydra overrides."""

    config: str
    overrides: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sam2Arch:
        if not isinstance(data.get("config"), str):
            raise RecipeError("a SAM 2 recipe names the official config: [architecture] config = "
                              "\"configs/sam2.1/sam2.1_hiera_t.yaml\"")
        return cls(data["config"], tuple(str(o) for o in data.get("overrides", ())))

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config, "overrides": list(self.overrides)}


def build_sam2_model(arch: Sam2Arch) -> nn.Module:
    """``sam2.build_sam.build_sam2`` (no checkpoint, CPU, eval mode), with the recipe's overrides."""
    try:
        from sam2.build_sam import build_sam2
    except ImportError as exc:
        raise ImportError(f"SAM 2 needs the official 'sam2' package: {SAM2_INSTALL_HINT}", name="sam2") from exc
    try:
        return build_sam2(arch.config, ckpt_path=None, device="cpu", mode="eval",
                          hydra_overrides_extra=list(arch.overrides)).eval()
    except Exception as exc:  # Hydra: MissingConfigException, ConfigCompositionException, constructor errors
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise RecipeError(f"sam2 cannot build '{arch.config}' with overrides {list(arch.overrides)} "
                          f"({type(exc).__name__}: {first[:200]}): check [architecture]") from exc


def load_sam2(arch: Sam2Arch, checkpoint: str | Path | None = None, *, random_seed: int | None = None,
              what: str | None = None) -> nn.Module:
    """Build ``SAM2Base`` and fill it from an official checkpoint or with seeded random weights."""
    from vitdeploy.models.checkpoints import check_fits, load_state_dict_file
    from vitdeploy.models.sam_decoder import randomize_prompt_decoder

    model = build_sam2_model(arch)
    if checkpoint is None:  # parameters and the prompt encoder's Gaussian buffer (drawn from the global RNG when built)
        return randomize_prompt_decoder(model, 0 if random_seed is None else random_seed).eval()
    state = load_state_dict_file(checkpoint)
    check_fits(model, state, what or arch.config, ": choose the recipe of this checkpoint's size (tiny, small, base-plus, large)")
    model.load_state_dict(state, strict=True)
    return model.eval()


__all__ = ["SAM2_INSTALL_HINT", "Sam2Arch", "build_sam2_model", "load_sam2"]
