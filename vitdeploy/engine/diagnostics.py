"""TensorRT parse and build failures as one-line messages that name the failing ONNX node.

The ONNX parser reports each problem as an ``IParserError`` (node index, name, op type, error code,
description). A build failure has no such object: TensorRT logs errors that mention layer names, and
the ONNX parser names layers after the ONNX nodes they came from, so the node is found by looking
for the graph's node names in the logged messages.
"""

from __future__ import annotations

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


def format_parse_failure(onnx_name: str, problems: Sequence[ParserProblem]) -> str:
    """``TensorRT cannot parse 'm.onnx': node 'X' (Op): why [CODE]; ...`` plus what to do."""
    if not problems:
        return f"TensorRT cannot parse '{onnx_name}' and reported no parser error: rerun with --log-file to see its log"
    quoted = "; ".join(p.describe() for p in problems[:QUOTE_LIMIT])
    more = f" (+{len(problems) - QUOTE_LIMIT} more)" if len(problems) > QUOTE_LIMIT else ""
    return (
        f"TensorRT cannot parse '{onnx_name}': {quoted}{more}. "
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
