"""Export recipes: one declarative TOML file per supported model variant, under ``export/``.

A recipe names the model family and variant, the architecture (the official constructor's own
argument names), the preprocessing constants and export defaults. ``vitdeploy export --recipe``
accepts a shipped recipe's name (``sam_vit_b``) or the path to a user's TOML file.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from vitdeploy.errors import RecipeError

#: Shipped recipes: the repository's top-level ``export/`` folder, installed as the data package
#: ``vitdeploy._recipes`` (setup.py), so a wheel outside the checkout carries them too.
RECIPE_DIR = Path(str(resources.files("vitdeploy._recipes")))

SAM_PIXEL_MEAN = (123.675, 116.28, 103.53)
SAM_PIXEL_STD = (58.395, 57.12, 57.375)


@dataclass(frozen=True)
class Recipe:
    """A parsed recipe file."""

    name: str
    family: str
    variant: str
    architecture: dict[str, Any]
    pixel_mean: tuple[float, float, float] = SAM_PIXEL_MEAN
    pixel_std: tuple[float, float, float] = SAM_PIXEL_STD
    checkpoint_prefix: str = ""
    opset: int = 18
    input_name: str = "image"
    output_name: str = "output"
    source: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def recipe_names() -> list[str]:
    """Names of the recipes shipped under ``export/``."""
    return sorted(p.stem for p in RECIPE_DIR.glob("*.toml"))


def load_recipe(name_or_path: str | Path) -> Recipe:
    """Load a shipped recipe by name, or a recipe file by path."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml" or candidate.exists():
        path = candidate
    else:
        path = RECIPE_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        raise RecipeError(
            f"recipe '{name_or_path}' not found: use one of {', '.join(recipe_names())} or a path to a .toml file"
        )
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RecipeError(f"recipe '{path}' is not valid TOML: {exc}") from exc
    try:
        model = data["model"]
        arch = dict(data["architecture"])
        family, variant = model["family"], model["variant"]
    except (KeyError, TypeError) as exc:
        raise RecipeError(f"recipe '{path}' lacks {exc}: it needs [model] family/variant and [architecture]") from exc
    prep = data.get("preprocessing", {})
    exp = data.get("export", {})
    return Recipe(
        name=path.stem,
        family=family,
        variant=variant,
        architecture=arch,
        pixel_mean=tuple(prep.get("pixel_mean", SAM_PIXEL_MEAN)),
        pixel_std=tuple(prep.get("pixel_std", SAM_PIXEL_STD)),
        checkpoint_prefix=model.get("checkpoint_prefix", ""),
        opset=int(exp.get("opset", 18)),
        input_name=exp.get("input_name", "image"),
        output_name=exp.get("output_name", "output"),
        source=path,
        extra={k: v for k, v in data.items() if k not in {"model", "architecture", "preprocessing", "export"}},
    )
