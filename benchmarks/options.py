"""The options most benchmarks take, defined once, and the report's writing.

    parser = timing_options(argparse.ArgumentParser(...), out="out/sam2_bench", rounds=2, runs=3, warmup=1)
    args = parsed(parser)          # --out made
    ...
    write_report(args.report, report)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def timing_options(parser: argparse.ArgumentParser, *, out: str | None = None, rounds: int | None = None,
                   runs: int | None = None, warmup: int | None = None, threads: int = 2, runtime: str | None = "auto",
                   precision: str | None = None, child: tuple[str, ...] | None = None,
                   child_flag: str = "--contender") -> argparse.ArgumentParser:
    """Add ``--rounds``, ``--runs``, ``--warmup`` (where given a default), ``--threads``, ``--runtime`` (unless None),
    ``--inference-precision`` (where ``precision`` is its help), ``--out`` (a folder, where given) and the hidden
    ``--contender`` (``child_flag``) by which a benchmark runs one contender in a child process (``child``: its
    metavars)."""
    for flag, default in (("--rounds", rounds), ("--runs", runs), ("--warmup", warmup)):
        if default is not None:
            parser.add_argument(flag, type=int, default=default)
    parser.add_argument("--threads", type=int, default=threads)
    if runtime is not None:
        parser.add_argument("--runtime", default=runtime)
    if precision is not None:
        parser.add_argument("--inference-precision", default=None, help=precision)
    if out is not None:
        parser.add_argument("--out", type=Path, default=Path(out))
    if child is not None:
        parser.add_argument(child_flag, nargs=len(child) if len(child) > 1 else None,
                            metavar=child if len(child) > 1 else child[0], help=argparse.SUPPRESS)
    return parser


def parsed(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The arguments, ``--out`` made where the benchmark takes one."""
    args = parser.parse_args()
    if getattr(args, "out", None) is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    return args


def write_report(path: str | Path | None, report: Any) -> None:
    """``report`` as indented JSON at ``path`` (its folder made), said where; nothing without a path."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(report, indent=2))
        print(f"report: {path}")
