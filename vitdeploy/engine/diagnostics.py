"""TensorRT parse and build failures as one-line messages that name the failing ONNX node.

The ONNX parser reports each problem as an ``IParserError`` (node index, name, op type, error code,
description). A build failure has no such object: TensorRT logs errors that mention layer names, and
the ONNX parser names layers after the ONNX nodes they came from, so the node is found by looking
for the graph's node names in the logged messages.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

#: At most this many problems or log lines are quoted in one message.
QUOTE_LIMIT = 3


@dataclass(frozen=True)
class ParserProblem:
    """One ONNX parser error, copied out of TensorRT's ``IParserError``."""

    node_index: int
    node_name: str
    op_type: str
    code: str
    desc: str

    def describe(self) -> str:
        where = f"node '{self.node_name}' ({self.op_type})" if self.node_name else (
            f"node #{self.node_index} ({self.op_type})" if self.node_index >= 0 else "the graph"
        )
        return f"{where}: {self.desc.strip()} [{self.code}]"


def parser_problems(parser: Any) -> list[ParserProblem]:
    """Every error of a TensorRT ``OnnxParser`` (``num_errors``, ``get_error(i)``)."""
    problems = []
    for index in range(parser.num_errors):
        err = parser.get_error(index)
        problems.append(
            ParserProblem(
                node_index=int(err.node()),
                node_name=str(err.node_name() or ""),
                op_type=str(err.node_operator() or "?"),
                code=str(err.code()).split(".")[-1],
                desc=str(err.desc()),
            )
        )
    return problems


def refused_initializer(problem: ParserProblem, initializer_types: dict[str, str]) -> tuple[str, str] | None:
    """(name, data type) of the weight a parser error says it could not import, when the graph holds it.

    The parser reports such an error against no node ("In node -1 ... Failed to import initializer: z"):
    the initializer's name and its ONNX data type are what the user can act on.
    """
    for name in re.findall(r"Failed to import initializer: (\S+)", problem.desc):
        if name in initializer_types:
            return name, initializer_types[name]
    return None


def format_parse_failure(onnx_name: str, problems: Sequence[ParserProblem], initializer_types: dict[str, str] | None = None,
                         library: str = "TensorRT") -> str:
    """``TensorRT cannot parse 'm.onnx': node 'X' (Op): why [CODE]; ...`` plus what to do.

    ``library`` names who refused (``TensorRT-RTX 1.7.1.116``); a refused weight is named with its data
    type, and the advice is then about the type, not the op.
    """
    if not problems:
        return f"{library} cannot parse '{onnx_name}' and reported no parser error: rerun with --log-file to see its log"
    weights = [w for w in (refused_initializer(p, initializer_types or {}) for p in problems) if w]
    if weights:
        named = ", ".join(f"'{name}' ({dtype})" for name, dtype in weights[:QUOTE_LIMIT])
        return (f"{library} cannot parse '{onnx_name}': it cannot import the weight {named}, a data type it does not take. "
                "Store it as FLOAT, FLOAT16 or BFLOAT16, or quantize to INT8 Q/DQ ('vitdeploy calibrate -p int8')")
    quoted = "; ".join(p.describe() for p in problems[:QUOTE_LIMIT])
    more = f" (+{len(problems) - QUOTE_LIMIT} more)" if len(problems) > QUOTE_LIMIT else ""
    return (
        f"{library} cannot parse '{onnx_name}': {quoted}{more}. "
        "Re-export without that op (check 'vitdeploy export' hygiene) or use a TensorRT version that supports it"
    )


def nodes_named_in(messages: Iterable[str], node_ops: dict[str, str]) -> list[tuple[str, str]]:
    """ONNX nodes (name, op type) whose names appear in ``messages``, longest name first, no duplicates.

    A name contained in a longer matched name (``/attn/MatMul`` inside ``/attn/MatMul_1``) is dropped,
    so the node reported is the one the message is about.
    """
    text = "\n".join(messages)
    found = sorted((n for n in node_ops if n and n in text), key=len, reverse=True)
    kept: list[str] = []
    for name in found:
        if not any(name in longer for longer in kept):
            kept.append(name)
    return [(name, node_ops[name]) for name in kept]


def format_build_failure(onnx_name: str, errors: Sequence[str], node_ops: dict[str, str]) -> str:
    """``TensorRT could not build an engine from 'm.onnx' (failing node 'X' (Op)): <TensorRT's errors>``."""
    nodes = nodes_named_in(errors, node_ops)
    where = f" (failing node '{nodes[0][0]}' ({nodes[0][1]}))" if nodes else ""
    quoted = " | ".join(e.strip() for e in errors[-QUOTE_LIMIT:]) or "no error was logged"
    return (
        f"TensorRT could not build an engine from '{onnx_name}'{where}: {quoted}. "
        "Rerun with --log-file build.log for TensorRT's full log"
    )
