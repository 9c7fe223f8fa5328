"""Every shell and Python block in README.md and docs/ runs, or says why it does not.

A block is preceded by ``<!-- docs-test: run -->`` (executed here, in order, in one scratch folder per
file where ``calibration/`` is the checkout's, with the venv's ``vitdeploy`` on PATH) or by
``<!-- docs-test: skip: REASON -->`` (full size, a checkpoint, a GPU). An unmarked block fails the test,
so a new example is either run or explained; a wrong runnable example fails CI.

A page whose examples go on from another page's files (the quick start's ``tiny.onnx`` and ``tiny_decoder.onnx``,
as its prose says) has the line ``<!-- docs-test: start from README.md -->``: its folder starts as a copy of that
page's folder after that page's blocks ran (once per run of this file), instead of exporting the same tiny models
again (each export is 10-15 s of a CI core).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(bash|sh|python)\s*$")
MARKER = re.compile(r"^<!-- docs-test: (run|skip: (.+)) -->$")
START_FROM = re.compile(r"^<!-- docs-test: start from (\S+) -->$", re.MULTILINE)
README_MAX_LINES = 250


def blocks(page: Path) -> list[tuple[int, str, str, str | None]]:
    """(line, language, code, marker) of each shell/Python block; marker ``run``, ``skip: ...`` or None."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
            if end is None:
                raise ValueError(f"{page.name}:{i + 1}: a {fence.group(1)} block is never closed (no ``` line after it)")
            previous = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
            marker = MARKER.match(previous.strip())
            found.append((i + 1, fence.group(1), "\n".join(lines[i + 1:end]) + "\n", marker.group(1) if marker else None))
            i = end
        i += 1
    return found


def test_an_unclosed_block_is_named(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n<!-- docs-test: run -->\n```bash\necho hi\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"page.md:4: a bash block is never closed"):
        blocks(page)


def test_the_readme_is_the_front_door() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move details to docs/"
    for link in re.findall(r"\]\((docs/[^)#]+)", "\n".join(lines)):
        assert (ROOT / link).is_file(), f"README links to {link}, which does not exist"


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_block_is_marked(page: Path) -> None:
    unmarked = [f"{page.name}:{line}" for line, _, _, marker in blocks(page) if marker is None]
    assert not unmarked, f"blocks without a '<!-- docs-test: run -->' or '<!-- docs-test: skip: why -->' line: {unmarked}"


RUNNABLE = [p for p in PAGES if any(marker == "run" for *_, marker in blocks(p))]


def start_from(page: Path) -> Path | None:
    """The page whose folder ``page``'s examples go on from, or None."""
    found = START_FROM.search(page.read_text(encoding="utf-8"))
    return ROOT / found.group(1) if found else None


def run_blocks(page: Path, folder: Path) -> None:
    """``page``'s runnable blocks, in order, in ``folder``."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONWARNINGS="ignore::DeprecationWarning", VITDEPLOY_PROBE="1")  # as a user runs them: auto probes
    for line, language, code, marker in blocks(page):
        if marker != "run":
            continue
        command = ["bash", "-euo", "pipefail", "-c", code] if language in ("bash", "sh") else [sys.executable, "-c", code]
        done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{page.name}:{line} ({language}) exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@pytest.fixture(scope="module")
def page_folders(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], Path]:
    """A page's folder after its blocks ran, run once (from its ``start from`` page's folder where it names one)."""
    ran: dict[Path, Path] = {}

    def folder_of(page: Path) -> Path:
        if page not in ran:
            folder = tmp_path_factory.mktemp(page.stem)
            origin = start_from(page)
            if origin is not None:
                shutil.copytree(folder_of(origin), folder, symlinks=True, dirs_exist_ok=True)
            else:
                (folder / "calibration").symlink_to(ROOT / "calibration")
            run_blocks(page, folder)
            ran[page] = folder
        return ran[page]

    return folder_of


def test_start_from_names_a_runnable_page() -> None:
    for page in PAGES:
        origin = start_from(page)
        assert origin is None or origin in RUNNABLE and start_from(origin) is None, \
            f"{page.name} starts from {origin}: name a page with runnable blocks that starts from none"


@pytest.mark.parametrize("page", RUNNABLE, ids=[p.relative_to(ROOT).as_posix() for p in RUNNABLE])
def test_runnable_blocks_run(page: Path, page_folders: Callable[[Path], Path]) -> None:
    page_folders(page)
