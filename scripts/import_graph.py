"""The package's import graph, read from its source (nothing is imported): modules, layers, edges, and edges
that climb a layer of ``vitdeploy.LAYERS``; and, for one package, its internal floors (the longest chain of
imports inside it). Run it on two checkouts to compare a restructuring:

    python scripts/import_graph.py                      # this checkout
    python scripts/import_graph.py --root /tmp/old      # another checkout (git worktree add /tmp/old REV)
    python scripts/import_graph.py --inside runtime     # floors inside vitdeploy/runtime

It reads imports the way ``tests/test_architecture.py`` does: every import, those inside functions and under
``if TYPE_CHECKING:`` too (``--root`` an older checkout: its graph read the same way).
"""

from __future__ import annotations

import argparse
import ast
import functools
from collections import Counter
from pathlib import Path


def modules(package: Path) -> dict[str, ast.Module]:
    out = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).with_suffix("")
        out[".".join(rel.parts).removesuffix(".__init__")] = ast.parse(path.read_text(), str(path))
    return out


def imports(tree: ast.Module, with_type_checking: bool = True) -> set[str]:
    skip = set() if with_type_checking else {
        id(c) for n in ast.walk(tree) if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
        for c in ast.walk(n)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("vitdeploy.")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("vitdeploy"):
            if node.module == "vitdeploy":
                found |= {f"vitdeploy.{a.name}" for a in node.names}
            else:
                found.add(node.module)
                found |= {f"{node.module}.{a.name}" for a in node.names}  # ``from pkg import module``
    return found


def layers(package: Path) -> tuple[tuple[str, ...], ...]:
    tree = ast.parse((package / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "LAYERS":
            return ast.literal_eval(node.value)
    raise SystemExit("no LAYERS in the package's __init__.py")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--inside", default="runtime", help="a package under vitdeploy to count floors in")
    args = parser.parse_args()
    package = args.root / "vitdeploy"
    trees = modules(package)
    order = layers(package)
    placed = {name for layer in order for name in layer}
    level = {name: k for k, layer in enumerate(order) for name in layer}

    def unit(module: str) -> str:
        parts = module.split(".")
        for end in range(len(parts), 1, -1):
            if ".".join(parts[1:end]) in placed:
                return ".".join(parts[1:end])
        return parts[1] if len(parts) > 1 else "vitdeploy"

    edges = {(m, t) for m, tree in trees.items() for t in imports(tree) if t in trees and t != m}
    climbing = [(m, t) for m, t in sorted(edges) if unit(m) != unit(t) and unit(m) in level and unit(t) in level
                and level[unit(t)] >= level[unit(m)]]
    print(f"modules {len(trees)}, lines {sum(len(p.read_text().splitlines()) for p in package.rglob('*.py'))}, "
          f"layers {len(order)}, edges {len(edges)}, edges that climb a layer {len(climbing)}")
    for m, t in climbing:
        print(f"  climbs: {m} -> {t}")
    inside = f"vitdeploy.{args.inside}"
    members = sorted(m for m in trees if m == inside or m.startswith(inside + "."))
    local = {m: sorted(t for s, t in edges if s == m and t in members and t != inside) for m in members}

    visiting: set[str] = set()
    cycles: list[tuple[str, str]] = []

    @functools.cache
    def floor(m: str) -> int:
        visiting.add(m)
        below = []
        for t in local[m]:
            if t in visiting:  # a cycle (two modules importing each other): counted once, not followed
                cycles.append((m, t))
            else:
                below.append(floor(t))
        visiting.discard(m)
        return 1 + max(below, default=0)

    floors = Counter(floor(m) for m in members)
    lines = sum(len((args.root / (m.replace(".", "/") + ".py")).read_text().splitlines())
                if (args.root / (m.replace(".", "/") + ".py")).exists()
                else len((args.root / m.replace(".", "/") / "__init__.py").read_text().splitlines()) for m in members)
    print(f"{inside}: {len(members)} modules, {lines} lines, {max(floors)} internal floors "
          f"(modules per floor, ground first: {[floors[k] for k in range(1, max(floors) + 1)]})")
    for m, t in cycles:
        print(f"  cycle: {m} -> {t}")
    units = Counter(unit(m) for m in members)
    print(f"{inside} by layer unit: " + ", ".join(f"{u} {n}" for u, n in sorted(units.items())))


if __name__ == "__main__":
    main()
