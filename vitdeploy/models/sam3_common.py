"""What the eager references of SAM 3's parts share (one module per part, named as its family:
:mod:`vitdeploy.models.sam3_vision_encoder`, :mod:`~vitdeploy.models.sam3_text_encoder`,
:mod:`~vitdeploy.models.sam3_detector`, :mod:`~vitdeploy.models.sam3_interactive_decoder`): the official package's
install hint and what a failed import of it says, a recipe's ``[architecture]`` table as a dataclass, and reading
official weights or seeding random ones."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Callable, ClassVar

from torch import nn

from vitdeploy.errors import MissingDependencyError, RecipeError

SAM3_INSTALL_HINT = "pip install --no-deps 'sam3==0.1.4' ftfy regex einops psutil wcwidth (after PyTorch and timm)"


def missing_sam3(exc: ImportError) -> MissingDependencyError:
    """What a failed import of the official ``sam3`` modules says: the package itself is missing, or a module it
    imports (``iopath``, ``pycocotools``, ``ftfy``: ``pip install --no-deps sam3`` brings none of them), named."""
    missing = (exc.name or "sam3").split(".")[0]
    if missing == "sam3":
        return MissingDependencyError("sam3", "SAM 3 (its official reference)", SAM3_INSTALL_HINT)
    return MissingDependencyError(missing, "SAM 3's official package (it imports it)",
                                  f"pip install {missing} ('pip install --no-deps sam3' brings none of what it imports)")


class ArchTable:
    """A recipe's ``[architecture]`` table as a frozen dataclass (subclasses are the dataclasses): ``from_dict``
    refuses keys the dataclass does not have, in words, takes lists as the tuples the fields hold and runs
    :meth:`check` before torch builds anything; ``to_dict`` gives the lists back (the export's metadata)."""

    #: What a refusal calls the model ("a SAM 3 text encoder").
    WHAT: ClassVar[str] = "this model"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise RecipeError(f"{cls.WHAT} has no [architecture] key(s) {unknown}: it takes {sorted(known)}")
        arch = cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})
        arch.check()
        return arch

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    #: (field, what it must be a multiple of: a number or another field, why) for :meth:`check`; a subclass extends
    #: its parent's.
    MULTIPLES: ClassVar[tuple[tuple[str, int | str, str], ...]] = ()

    def check(self) -> None:
        """Refuse sizes the official classes cannot build or run: every rule of :attr:`MULTIPLES` (subclasses add
        the rules that are not multiples)."""
        for name, divisor, why in self.MULTIPLES:
            value, by = getattr(self, name), getattr(self, divisor) if isinstance(divisor, str) else divisor
            if value % by:
                of = f"{divisor} {by}" if isinstance(divisor, str) else str(by)
                raise RecipeError(f"{name} {value} is not a multiple of {of}" + (f" ({why})" if why else ""))


class GridArchTable(ArchTable):
    """An :class:`ArchTable` of a model over an image's token grid (``img_size`` and ``patch_size`` fields)."""

    MULTIPLES: ClassVar[tuple[tuple[str, int | str, str], ...]] = (("img_size", "patch_size", ""),)

    @property
    def grid(self) -> int:
        """Tokens per side."""
        return self.img_size // self.patch_size


def build_position_encoding(num_pos_feats: int) -> nn.Module:
    """The official sine position encoding as ``sam3.model_builder`` makes each one (``PositionEmbeddingSine``,
    normalized, temperature 10000): the vision neck's (``num_pos_feats=d_model``: the ``vision_pos_enc`` the detector
    and the tracker read), the geometry encoder's and the tracker memory's (``mem_dim``). The one shim, named and
    changing no arithmetic: the builder's ``precompute_resolution=1008`` fills the cache on "cuda"; None computes it
    on the first call, on this device, by the same code."""
    try:
        from sam3.model.position_encoding import PositionEmbeddingSine
    except ImportError as exc:
        raise missing_sam3(exc) from exc
    return PositionEmbeddingSine(num_pos_feats=num_pos_feats, normalize=True, scale=None, temperature=10000,
                                 precompute_resolution=None)


def select_under(state: Mapping[str, Any], prefixes: tuple[str, ...]) -> dict[str, Any]:
    """The keys under the first of ``prefixes`` the checkpoint has, with it stripped (all keys when it has none)."""
    from vitdeploy.models.checkpoints import select_prefix

    prefix = next((p for p in prefixes if any(k.startswith(p) for k in state)), "")
    return select_prefix(state, prefix) if prefix else dict(state)


def read_weights(checkpoint: str | Path | Mapping[str, Any]) -> Mapping[str, Any]:
    """A checkpoint's state dict: the file read (``weights_only=True`` or safetensors), or the dict already read (one
    ``sam3.pt`` fills several modules: it is read once)."""
    from vitdeploy.models.checkpoints import load_state_dict_file

    return checkpoint if isinstance(checkpoint, Mapping) else load_state_dict_file(checkpoint)


def load_official_weights(model: nn.Module, checkpoint: str | Path | Mapping[str, Any] | None, *,
                          random_seed: int | None, what: str, hint: str,
                          select: Callable[[Mapping[str, Any]], dict[str, Any]],
                          randomize: Callable[[nn.Module, int], nn.Module] | None = None) -> nn.Module:
    """Fill an official module: from ``checkpoint`` (:func:`read_weights`; ``select`` maps its keys to the module's,
    which must then fit exactly) or, without one, with seeded random weights (``randomize``, default
    :func:`~vitdeploy.models.random_weights.randomize_parameters`)."""
    from vitdeploy.models.checkpoints import check_fits
    from vitdeploy.models.random_weights import randomize_parameters

    if checkpoint is None:
        return (randomize or randomize_parameters)(model, 0 if random_seed is None else random_seed).eval()
    state = select(read_weights(checkpoint))
    check_fits(model, state, what, hint)
    model.load_state_dict(state, strict=True)
    return model.eval()
