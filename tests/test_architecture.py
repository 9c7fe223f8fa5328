"""The package's shape, read from the code: the layer order of ``vitdeploy.LAYERS`` and one home per model family."""

from __future__ import annotations

import ast
from pathlib import Path

import vitdeploy
from vitdeploy.families import FAMILIES

PACKAGE = Path(vitdeploy.__file__).parent


def _modules() -> dict[str, ast.Module]:
    """Dotted module name -> parsed source, for every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        out[name] = ast.parse(path.read_text(), str(path))
    return out


#: Every name ``vitdeploy.LAYERS`` places: a module or package under ``vitdeploy``, or a wing of one.
PLACED = {name for layer in vitdeploy.LAYERS for name in layer}


def _unit(module: str) -> str:
    """The layer unit of a dotted name: the longest name in ``vitdeploy.LAYERS`` that holds it (a wing such as
    ``runtime.backends``, else the module or package directly under ``vitdeploy``)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "vitdeploy"
    for end in range(len(parts), 1, -1):
        if ".".join(parts[1:end]) in PLACED:
            return ".".join(parts[1:end])
    return parts[1]


def _imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, imported vitdeploy module) for every import, in functions too; ``if TYPE_CHECKING:`` blocks excepted."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(child) for child in ast.walk(node))
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("vitdeploy.")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "vitdeploy":
                found += [(node.lineno, f"vitdeploy.{a.name}") for a in node.names]
            elif node.module.startswith("vitdeploy."):
                found.append((node.lineno, node.module))
    return found


def test_every_module_has_a_layer() -> None:
    units = {_unit(name) for name in _modules()} - {"vitdeploy"}
    assert units - PLACED == set(), "add these to vitdeploy.LAYERS"
    assert PLACED - units == set(), "vitdeploy.LAYERS names modules that do not exist"


def test_imports_go_down_the_layers_only() -> None:
    level = {name: k for k, layer in enumerate(vitdeploy.LAYERS) for name in layer}
    level["__version__"] = -1  # ``from vitdeploy import __version__``: the package's own constant
    wrong = []
    for module, tree in _modules().items():
        here = _unit(module)
        if here == "vitdeploy":
            continue
        for line, target in _imports(tree):
            there = _unit(target)
            if there != here and level[there] >= level[here]:
                wrong.append(f"{module}:{line} imports {target} ({here} is layer {level[here]}, {there} is {level[there]})")
    assert wrong == []


def test_the_graph_has_an_edge_the_check_would_catch() -> None:
    """The reader sees lazy imports inside functions (most of this package's imports are lazy)."""
    tree = _modules()["vitdeploy.pipeline"]
    lazy = [target for _, target in _imports(tree) if target == "vitdeploy.models.recipes"]
    assert lazy, "the import reader missed pipeline's function-level import of the recipes"


#: Modules outside ``vitdeploy/families`` allowed to compare a family name, and why.
FAMILY_NAME_GUARDS = {
    # SamPredictor composes exactly a SAM image encoder and a SAM mask decoder; the guard names what it takes.
    "vitdeploy.runtime.apps.sam.predictor",
    # Sam2ImagePredictor likewise composes a SAM 2 image encoder and mask decoder, and says so when given SAM 1 files.
    "vitdeploy.runtime.apps.sam2.image_predictor",
    # The picker of a predictor for a pair of files: SAM 2 files to Sam2ImagePredictor, others to SamPredictor.
    "vitdeploy.runtime.apps.predictors",
}


def test_no_family_dispatch_outside_families() -> None:
    """No ``==``/``!=``/``in``/``match`` on a family name outside ``vitdeploy/families``: the family decides."""
    names = set(FAMILIES)
    found = []
    for module, tree in _modules().items():
        if module.startswith("vitdeploy.families") or module in FAMILY_NAME_GUARDS:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                parts = [node.left, *node.comparators]
            elif isinstance(node, ast.match_case):
                parts = [node.pattern]
            else:
                continue
            for part in parts:
                for leaf in ast.walk(part):
                    value = getattr(leaf, "value", None)
                    if isinstance(value, ast.Constant):
                        value = value.value
                    if isinstance(value, str) and (value in names or any(value.startswith(n) for n in ("sam_", "timm_"))):
                        found.append(f"{module}:{node.lineno}: {ast.unparse(node) if hasattr(node, 'lineno') else value}")
    assert found == []


def test_every_registered_family_implements_the_protocol() -> None:
    from vitdeploy.families.base import ModelFamily

    for name, family in FAMILIES.items():
        assert family.name == name
        for method in ("load_eager", "export", "eager_reference"):
            assert getattr(type(family), method) is not getattr(ModelFamily, method), f"{name} lacks {method}"


#: Other names for the model's input side (see vitdeploy/sizes.py); only the official constructors use them.
OTHER_SIZE_NAMES = {"img_size", "image_size", "input_image_size"}


def _size_name_uses(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, name) where vitdeploy's own code names the input side otherwise than ``input_size``: a parameter,
    a variable or a keyword argument. The ``*Arch`` dataclasses' fields (a recipe's ``[architecture]`` table, in the
    official constructors' names), official attributes (``encoder.img_size``) and keywords passed to official
    callables or to the ``*Arch`` classes are the exceptions."""
    mirrors = {id(field.target) for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef) and cls.name.endswith("Arch")
               for field in cls.body if isinstance(field, ast.AnnAssign)}  # SamEncoderArch.img_size, ...
    found = []
    for node in ast.walk(tree):
        if id(node) in mirrors:
            continue
        if isinstance(node, ast.arg) and node.arg in OTHER_SIZE_NAMES:
            found.append((node.lineno, f"parameter {node.arg}"))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id in OTHER_SIZE_NAMES:
            found.append((node.lineno, f"variable {node.id}"))
        elif isinstance(node, ast.Call):
            callee = ast.unparse(node.func)
            official = callee == "cls" or callee.endswith(("Arch", "set_input_size", "create_model", "replace")) or \
                callee.startswith(("Sam", "PromptEncoder", "ImageEncoderViT", "timm."))
            found += [(node.lineno, f"keyword {k.arg}= to {callee}") for k in node.keywords
                      if k.arg in OTHER_SIZE_NAMES and not official]
    return found


def test_the_input_side_has_one_name() -> None:
    """``input_size`` in code, CLI and metadata; ``img_size``/``input_image_size`` only where official code reads them."""
    offenders = [f"{name}:{line}: {what}" for name, tree in _modules().items()
                 for line, what in _size_name_uses(tree)]
    assert offenders == []


def test_the_size_name_check_would_catch_a_second_name() -> None:
    tree = ast.parse("def export(model, image_size=None):\n    img_size = image_size\n    return run(model, img_size=img_size)")
    assert [what for _, what in _size_name_uses(tree)] == ["parameter image_size", "variable img_size",
                                                            "keyword img_size= to run"]


def test_every_verb_module_is_in_the_registered_list() -> None:
    """Verbs are registered in one explicit list (vitdeploy.cli.VERB_MODULES); a verb module left out of it is caught."""
    from vitdeploy.cli import VERB_MODULES

    assert sorted(VERB_MODULES) == sorted(p.stem for p in (PACKAGE / "cli").glob("*_cmd.py"))
