"""What every model family provides, and the export options all of them take.

A family is the one place that knows how a kind of model is built, rewritten, exported and checked:
the stages below it (models, rewrites, onnx_export, runtime) take plain objects, and the
verbs above it (validation, precision, benchmark, pipeline, cli) ask :func:`vitdeploy.families.family_of_recipe` or
:func:`vitdeploy.families.family_of` instead of comparing family names.

This module and every family module import no torch at import time: a runtime-only install reads
families to preprocess images and make inputs. Torch-side stages are imported inside the methods
that need them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from vitdeploy.echo import Echo
from vitdeploy.errors import CheckpointError, InputError, RecipeError
from vitdeploy.runtime_facts import CPU_DEFAULT_ROWS, MODEL_PARTS
from vitdeploy.targets import DEFAULT_TARGET

if TYPE_CHECKING:  # annotations only
    import numpy as np
    from torch import nn

    from vitdeploy.models.recipes import Recipe
    from vitdeploy.onnx_export.exporter import ExportResult
    from vitdeploy.runtime.processing.input_sets import InputSet


@dataclass(frozen=True)
class ExportOptions:
    """How to export, beyond the recipe and its weights (``vitdeploy export``'s options)."""

    checkpoint: str | None = None
    random_seed: int | None = None  # the seed of a --random-weights export, None for a checkpoint
    input_size: int | None = None  # None: the recipe's size
    batch: int = 1
    dynamic_batch: bool = False
    opset: int | None = None  # None: the recipe's opset
    layernorm2d: str | None = None  # None: the family's default form
    target: str = DEFAULT_TARGET

    @property
    def checkpoint_name(self) -> str | None:
        return Path(self.checkpoint).name if self.checkpoint else None

    def checkpoint_sha256(self) -> str | None:
        from vitdeploy.fileio import sha256_file

        return sha256_file(self.checkpoint) if self.checkpoint else None

    def provenance(self) -> dict[str, Any]:
        """Where the weights came from, in :func:`vitdeploy.metadata.artifact_metadata`'s keywords: every family's
        export records it (``random_seed``, ``checkpoint_name``, ``checkpoint_sha256``)."""
        return {"random_seed": self.random_seed, "checkpoint_name": self.checkpoint_name,
                "checkpoint_sha256": self.checkpoint_sha256()}


class ModelFamily:
    """One model family behind the interface the verbs use. Subclasses set ``name`` and override the rest."""

    #: The name recipes give in ``[model] family`` and exports record in their metadata.
    name: str = ""
    #: What a file of this family is for, in one line (``vitdeploy inspect`` prints it).
    role: str = ""
    #: The model a file of this family belongs to and which part of it the file is: applications compose parts by
    #: these (``SamPredictor`` takes ``("sam", "image_encoder")`` and ``("sam", "mask_decoder")``), never by family
    #: name. Set from the data file the C++ library reads too (``model_parts`` of ``vitdeploy/data/runtime_facts.json``).
    model: str = ""
    part: str = ""
    #: The end of the name of the recipes that export this part (``sam2.1_hiera_tiny_decoder``): what a refusal says to run.
    recipe_suffix: str = ""
    #: Files of this family in a sentence, plural (``SAM encoders``).
    title: str = ""
    #: ``((export target, precision), what was measured)`` on ONNX Runtime's CUDA provider against the official model:
    #: where ``--device cuda`` runs without ``--allow-unverified``.
    verified_on_cuda: tuple[tuple[tuple[str, str], str], ...] = ()
    #: Attention forms ``--target`` may pick (:mod:`vitdeploy.targets`; every family has the default).
    export_targets: tuple[str, ...] = (DEFAULT_TARGET,)
    #: LayerNorm2d forms ``--layernorm2d`` may pick (the first is the default); empty: the family has none.
    layernorm2d_forms: tuple[str, ...] = ()
    #: Metadata keys a file of this family carries: its reference, preprocessing and inputs are built from them.
    required_metadata: tuple[str, ...] = ("architecture", "input_size")
    #: The metadata keys the torch-free runtime reads from a file of this family (its preprocessing): the seam that
    #: opens every deployed file refuses one without them, naming the key, before any verb uses it.
    runtime_metadata: tuple[str, ...] = ("input_size",)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.name in MODEL_PARTS:
            cls.model, cls.part = MODEL_PARTS[cls.name]

    @property
    def cpu_default_rows(self) -> tuple[str, ...]:
        """The rows of this CPU's measured defaults (by their CPU flags, ``amx_bf16``) measured on this family: where
        ``--runtime auto`` may take a row's runtime and policy for its FP32 files without a profile. The rows and
        the families each was measured on are in ``vitdeploy/data/runtime_facts.json``."""
        return tuple(row.key for row in CPU_DEFAULT_ROWS if self.name in row.measured_on)

    def probe_scopes(self, metadata: dict[str, Any]) -> tuple[str, ...]:
        """The exporter's name scopes of the blocks a first-use probe times for a large file of this family (one of
        each kind of block, e.g. ``("blocks.0", "blocks.2")`` for a windowed and a global SAM block): a part of the
        graph that ranks the runtimes as the whole does. Empty: the probe runs the whole graph."""
        return ()

    def architecture_class(self) -> type | None:
        """The dataclass this family builds its model from ``architecture`` with (None: its keys are not checked)."""
        return None

    def architecture(self, data: dict[str, Any]) -> Any:
        """The architecture a recipe's or file's ``architecture`` table describes, checked (families whose class has
        ``from_dict``: :class:`vitdeploy.models.sam3_common.ArchTable`)."""
        return self.architecture_class().from_dict(data)

    def architecture_fields(self) -> frozenset[str] | None:
        """The ``architecture`` keys this family builds its model from (None: not checked)."""
        from dataclasses import fields

        cls = self.architecture_class()
        return None if cls is None else frozenset(f.name for f in fields(cls))

    def metadata_problems(self, metadata: dict[str, Any], for_reference: bool = False) -> list[str]:
        """What a file claiming this family carries that this family cannot build, and (``for_reference``: the eager
        reference and its inputs are to be rebuilt) which of :attr:`required_metadata` it lacks."""
        problems = [f"it lacks '{key}'" if key not in metadata else f"its '{key}' is null"
                    for key in self.required_metadata if for_reference and metadata.get(key) is None]
        arch, fields = metadata.get("architecture"), self.architecture_fields()
        if isinstance(arch, dict) and fields is not None and set(arch) - fields:
            problems.append(f"its architecture has key(s) {sorted(set(arch) - fields)} that {self.name} does not have")
        return problems

    # -- export ---------------------------------------------------------------------------------------

    def check_export(self, recipe: Recipe, options: ExportOptions) -> None:
        """Refuse a recipe or options this family cannot export, without torch (before minutes of work).
        The default checks nothing; families whose architecture parses without torch check it here."""

    #: ``module:function`` that builds this family's eager model from its architecture and fills it, called as
    #: ``load(arch, checkpoint, random_seed=..., what=...)`` (the SAM 3 parts' references); empty: the family's own
    #: :meth:`load_eager`.
    eager_loader: ClassVar[str] = ""

    def load_eager(self, recipe: Recipe, checkpoint: str | None, random_seed: int | None) -> tuple[Any, nn.Module]:
        """(architecture, eager official model) of a recipe, from a checkpoint or seeded random weights: by
        :attr:`eager_loader` where the family names one."""
        if not self.eager_loader:
            raise NotImplementedError
        import importlib

        module, _, function = self.eager_loader.partition(":")
        arch = self.architecture(recipe.architecture)
        load = getattr(importlib.import_module(module), function)
        return arch, load(arch, checkpoint, random_seed=random_seed, what=f"recipe '{recipe.name}' ({recipe.variant})")

    def export(self, recipe: Recipe, arch: Any, model: nn.Module, output: str | Path, options: ExportOptions,
               echo: Echo) -> ExportResult:
        """Rewrite ``model`` into its export-friendly form, stamp its metadata and export it to ``output``.

        Every family does it in one shape: ``artifact_metadata(family=self.name, variant=..., input_size=...,
        pixel_mean=..., pixel_std=..., architecture=arch.to_dict(), **options.provenance(), **its own keys)``, then
        ``export_onnx`` (or an ``onnx_export`` function that rewrites the module and calls it) with that metadata."""
        raise NotImplementedError

    # -- validation -----------------------------------------------------------------------------------

    def eager_reference(self, metadata: dict[str, Any], checkpoint: str | None) -> nn.Module:
        """The official eager model an export was made from, taking and returning the graph's inputs and outputs."""
        raise NotImplementedError

    def random_input_sets(self, metadata: dict[str, Any], input_names: list[str], input_shapes: dict[str, list[Any]],
                          count: int, seed: int = 0) -> list[InputSet]:
        """``count`` different seeded inputs; image models get standard-normal images (normalized pixels' scale)."""
        from vitdeploy.runtime.processing.input_sets import random_image_inputs

        name = input_names[0]
        shape = [d if isinstance(d, int) else 1 for d in input_shapes[name]]
        return random_image_inputs(name, shape, count, seed)

    def probe_feeds(self, metadata: dict[str, Any], input_names: list[str],
                    input_shapes: dict[str, list[Any]]) -> dict[str, Any]:
        """The inputs a first-use probe times the whole graph on: at the shapes it runs at most of the time (by
        default the first of :meth:`random_input_sets`; a graph with dynamic sizes overrides it with its steady state)."""
        return self.random_input_sets(metadata, input_names, input_shapes, 1)[0].feeds

    def template_feeds(self, metadata: dict[str, Any], template: dict[str, list[Any]],
                       seed: int = 0) -> dict[str, np.ndarray] | None:
        """Inputs of the template's shapes when plain standard-normal arrays would not do (``benchmark``), else None."""
        return None

    # -- images ---------------------------------------------------------------------------------------

    def image_preprocessor(self, metadata: dict[str, Any]) -> Callable[[np.ndarray], np.ndarray]:
        """HxWx3 uint8 RGB -> the model's input array, as the official preprocessing does."""
        raise InputError(f"a {self.name} model does not take images: drop --images")

    def calibration_preprocessor(self, metadata: dict[str, Any]) -> Any:
        """An object with ``input_size``, ``resize`` and ``normalize_and_pad`` for calibration from images."""
        raise InputError(f"calibrating from images is not supported for model family '{self.name}' (its inputs are "
                         "not images, or not yet): use the Python API with your own calibration feeds")


def recipe_section(recipe: Recipe, name: str, allowed: set[str]) -> dict[str, Any]:
    """A recipe's family-specific ``[name]`` table, refusing keys the family does not know."""
    table = dict(recipe.extra.get(name, {}))
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise RecipeError(f"recipe '{recipe.name}' has unknown [{name}] keys {unknown}: allowed are {sorted(allowed)}")
    return table


def reference_seed(metadata: dict[str, Any], checkpoint: str | None) -> int | None:
    """The seed to rebuild a random-weights export's reference from, or None when ``checkpoint`` is loaded;
    refuses a checkpoint for a random-weights export and any other checkpoint than the export's (SHA-256)."""
    from vitdeploy.fileio import sha256_file

    if checkpoint is None:
        if not metadata.get("random_weights"):
            raise InputError(f"this model was exported from checkpoint '{metadata.get('checkpoint')}': pass it with "
                             "--checkpoint")
        seed = metadata.get("random_seed")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise InputError(f"this model says it has random weights but records no seed to rebuild its reference from "
                             f"('random_seed' is {'missing' if 'random_seed' not in metadata else repr(seed)}): export it "
                             "again with 'vitdeploy export' (files edited by hand are not trusted)")
        return seed
    if metadata.get("random_weights"):
        raise InputError(f"this model was exported with random weights (seed {metadata.get('random_seed')}), so "
                         f"checkpoint '{checkpoint}' is not its reference: leave out --checkpoint (the reference is "
                         "rebuilt from the seed), or export from the checkpoint first")
    recorded = metadata.get("checkpoint_sha256")
    if recorded and sha256_file(checkpoint) != recorded:
        raise CheckpointError(
            f"checkpoint '{checkpoint}' is not the one this model was exported from "
            f"('{metadata.get('checkpoint')}', sha256 {recorded[:12]}...): pass that checkpoint"
        )
    return None
