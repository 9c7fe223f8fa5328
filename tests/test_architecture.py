"""The package's shape, read from the code: the layer order of ``vitdeploy.LAYERS`` and one home per model family."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import vitdeploy
from vitdeploy.families import FAMILIES

PACKAGE = Path(vitdeploy.__file__).parent
ROOT = PACKAGE.parent


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
    """(line, imported vitdeploy module) for every import: in functions too, and under ``if TYPE_CHECKING:`` (an import
    for annotations only ties two modules as a reader sees them: it hid the circle of runtime_facts and
    cpu_features)."""
    found = []
    for node in ast.walk(tree):
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


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of a graph (module -> modules it imports): each strongly connected set of two or more."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(edges.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            members = []
            while True:
                member = stack.pop()
                members.append(member)
                if member == module:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


def test_no_two_modules_import_each_other() -> None:
    """No import cycle through any chain of modules, lazy imports included (a lazy import hides a circle from Python,
    not from a reader): each of the three there were (SAM 3's image model and click predictor, TensorRT's library type
    and engine checks, SAM 3's vision and interactive references) had a third module's worth of shared code in one of
    the two."""
    modules = _modules()
    edges = {m: {t for _, t in _imports(tree) if t in modules and t != m} for m, tree in modules.items()}
    assert _cycles(edges) == []


def test_the_cycle_check_would_catch_one() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


#: Prefixes of family names (and of the next model's): a comparison with a string that starts so is a family test.
FAMILY_PREFIXES = ("sam_", "sam2_", "sam3_", "timm_")


def family_name_uses(tree: ast.Module, names: set[str]) -> list[tuple[int, str]]:
    """(line, what) for every family name a module writes outside ``vitdeploy/families``: any string constant equal
    to a family name (in a comparison, a variable, a tuple, a keyword, a dict key), and any comparison, ``match`` or
    ``startswith``/``endswith`` with a string that starts like one."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            found.append((node.lineno, repr(node.value)))
        if isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
        elif isinstance(node, ast.match_case):
            parts = [node.pattern]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("startswith", "endswith"):
            parts = list(node.args)
        else:
            continue
        for part in parts:
            for leaf in ast.walk(part):
                value = getattr(leaf, "value", None)
                if isinstance(value, ast.Constant):
                    value = value.value
                if isinstance(value, str) and value not in names and value.startswith(FAMILY_PREFIXES):
                    found.append((getattr(node, "lineno", 0), ast.unparse(node)))
    return found


#: The modules outside ``vitdeploy/families`` that write a family's name, and why: none. The export functions below
#: ``families`` stamp the name ``runtime_facts.json`` gives their model part (``family_name("sam", "image_encoder")``).
FAMILY_NAME_WRITERS: dict[str, list[str]] = {}

#: The C++ sources: they ask the data file which model and part a family is (``require_part``), never a name.
CPP_SOURCES = ("cpp/src", "cpp/include", "cpp/apps")


def cpp_family_name_uses(text: str, names: set[str]) -> list[str]:
    """Every C++ string literal (comments aside) that is a family name or the start of one (``"sam2_"``)."""
    tokens = re.findall(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*.*?\*/', text, flags=re.S)
    literals = [t[1:-1] for t in tokens if t.startswith('"')]
    return [lit for lit in literals if lit in names or (lit.endswith("_") and any(n.startswith(lit) for n in names))]


def test_no_family_name_in_the_cpp_library() -> None:
    names = set(FAMILIES)
    found = {}
    for folder in CPP_SOURCES:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".cpp", ".hpp", ".h", ".in"):
                uses = cpp_family_name_uses(path.read_text(), names)
                if uses:
                    found[str(path.relative_to(ROOT))] = uses
    assert found == {}


def test_the_cpp_family_name_check_would_catch_one() -> None:
    code = ('encoder.require_family("sam_image_encoder", "--encoder");  // not "timm_vit" in a comment\n'
            'if (f.rfind("sam2_", 0) == 0) {}\nputs("sam_cli \\"q\\" sam"); /* "timm_hiera" */')
    assert cpp_family_name_uses(code, set(FAMILIES)) == ["sam_image_encoder", "sam2_"]


def test_no_family_name_outside_families() -> None:
    """Nothing outside ``vitdeploy/families`` writes a family's name: applications ask a file's family for its model
    and part (``model_part``), runtimes and CPU rows ask the family for what was measured on it."""
    names = set(FAMILIES)
    found: dict[str, list[str]] = {}
    for module, tree in _modules().items():
        if not module.startswith("vitdeploy.families"):
            for _, what in family_name_uses(tree, names):
                found.setdefault(module, []).append(what.strip("'"))
    assert found == FAMILY_NAME_WRITERS


def test_the_family_name_check_catches_names_through_variables_tuples_and_prefixes() -> None:
    """The twin: each way of writing a family name the check must catch, caught."""
    code = """
PAIR = ("sam_image_encoder", "x")
def f(meta, family=FAMILY):
    kind = "sam2_mask_decoder"
    if meta["family"] == kind: pass
    if meta["family"].startswith("sam2_"): pass
    if family in ("timm_" + "vit",): pass
    return dict(family="timm_hiera")
"""
    found = family_name_uses(ast.parse(code), set(FAMILIES))
    assert sorted({line for line, _ in found}) == [2, 4, 6, 7, 8], found


def test_every_registered_family_implements_the_protocol() -> None:
    from vitdeploy.families.base import ModelFamily

    for name, family in FAMILIES.items():
        assert family.name == name
        for method in ("export", "eager_reference"):
            assert getattr(type(family), method) is not getattr(ModelFamily, method), f"{name} lacks {method}"
        if type(family).load_eager is ModelFamily.load_eager:  # the generic one, by the named loader
            module, _, function = family.eager_loader.partition(":")
            assert function and callable(getattr(importlib.import_module(module), function, None)), \
                f"{name} lacks load_eager and names no eager_loader that resolves ({family.eager_loader!r})"


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
                callee.startswith(("Sam", "PromptEncoder", "ImageEncoderViT", "timm.", "vitdet."))
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


#: The largest a package module may grow before it is split (issue 73: a module of two ideas is two modules).
MODULE_MAX_LINES = 500
#: The most parameters a verb's function may take: option groups are reusable decorators (``vitdeploy/cli/groups.py``)
#: that hand a verb one object per group, not one parameter per option.
VERB_MAX_PARAMETERS = 12


def _too_long(folder: Path, limit: int) -> list[str]:
    """'path (N lines)' for each Python file under ``folder`` over ``limit`` lines, the path relative to it."""
    lengths = {p: len(p.read_text().splitlines()) for p in sorted(folder.rglob("*.py"))}
    return [f"{p.relative_to(folder)} ({n} lines)" for p, n in lengths.items() if n > limit]


def test_no_package_module_is_over_the_size_limit() -> None:
    long = _too_long(PACKAGE, MODULE_MAX_LINES)
    assert not long, f"modules over {MODULE_MAX_LINES} lines: {long}; split each by the ideas it holds"


def test_the_size_check_would_catch_a_long_module(tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text("x = 1\n" * (MODULE_MAX_LINES + 1))
    (tmp_path / "short.py").write_text("x = 1\n" * MODULE_MAX_LINES)
    assert _too_long(tmp_path, MODULE_MAX_LINES) == [f"long.py ({MODULE_MAX_LINES + 1} lines)"]


def _parameter_counts(tree: ast.Module) -> dict[str, int]:
    """Top-level function name -> how many parameters it takes (positional, keyword-only, ``*args``, ``**kwargs``)."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            a = node.args
            out[node.name] = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
    return out


def test_no_verb_function_takes_more_than_twelve_parameters() -> None:
    wide = [f"{p.name}:{name} ({n})" for p in sorted((PACKAGE / "cli").glob("*_cmd.py"))
            for name, n in _parameter_counts(ast.parse(p.read_text())).items() if n > VERB_MAX_PARAMETERS]
    assert not wide, f"verb functions over {VERB_MAX_PARAMETERS} parameters: {wide}; take an option group's object"


def test_the_parameter_count_sees_every_kind_of_parameter() -> None:
    tree = ast.parse("def verb(a, /, b, *c, d, **e):\n    pass\n")
    assert _parameter_counts(tree) == {"verb": 5}
