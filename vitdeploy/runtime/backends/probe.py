"""The first-use probe: which eligible deployment of a file is fastest on this machine, measured here, in seconds.

``--runtime auto`` without a deployment profile asks :func:`decide`. The numerics and the speed are decided apart:

* **Eligible** (:func:`eligible`) is a question of numerics and units, answered without timing anything: every CPU
  runtime installed here that runs the file (the registry's ``cpu_gap``), the file's own math on each, ONNX Runtime's
  attention forms where the file's target folds attention, and a reduced precision policy only where its parity
  budget is proven for the file's family (``proven_policies`` in ``vitdeploy/data/runtime_facts.json``, each with the
  measurement that proves it) and this CPU has the units for it (BF16: AMX or AVX512-BF16). What is left out is said,
  with why.
* **Fastest** is measured on this machine (:func:`probe`): each candidate runs, at every core this process may use
  (then the fastest once more at half of them, where SMT siblings or a short run may favour fewer), a
  representative part of the real graph at the file's real shapes (:func:`probe_part`: for a large file, the blocks
  its family names, e.g. one windowed and one global block of a SAM encoder; a small file whole). A candidate whose
  warm-up run is far behind the best one's is not timed further.
  Each candidate's outputs on the part are held to its budget against the file's math on ONNX Runtime, so a
  runtime's fault cannot win on speed. ``--runtime auto``'s probe runs in a worker process: a runtime that crashes on
  a candidate (a native fault: under qemu, probing the tiny SAM decoder ended 'predict' with SIGSEGV) rules out that
  candidate instead of ending the user's program, and the probe's memory is not the program's.

The decision is cached per machine in the user's cache folder (``$VITDEPLOY_CACHE_DIR/decisions``), keyed by what it
depends on: the CPU (model name, family/model, the flags that pick kernels, the cores), the installed runtimes'
versions, the threads and the file's identity (its vitdeploy metadata without the weights' provenance, and its size),
so two checkpoints of one architecture share one probe and a decision for another CPU or runtime version is never
read. ``VITDEPLOY_PROBE=0`` turns the probe off (the documented per-CPU rows of ``runtime_facts.json`` then apply);
``--runtime onnxruntime|openvino`` bypasses the whole choice.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from vitdeploy.cpu_features import CpuFeatures, available_cores, cpu_features, physical_cores
from vitdeploy.errors import InputError, VitdeployError
from vitdeploy.precisions import Precision
from vitdeploy.runtime.backends.registry import DEFAULT_RUNTIME, ONNX_RUNTIMES, RUNTIMES, FileNeeds
from vitdeploy.runtime_facts import PROVEN_POLICIES

#: ``VITDEPLOY_PROBE=0`` (or ``off``/``no``/``false``) turns the first-use probe off.
PROBE_ENV = "VITDEPLOY_PROBE"
#: The cached decision's format tag (a reader ignores any other).
DECISION_FORMAT = "vitdeploy-deployment-decision/1"
#: A file at most this large is probed whole (a decoder, a tiny model); a larger one on the part its family names.
WHOLE_GRAPH_BYTES = 48 << 20
#: A candidate whose warm-up run took more than this many times the best warm-up so far is not timed further: a
#: first run took at most 1.6x a later one (SAM ViT-B blocks 0 and 2 at 1024, Xeon with AMX, 2 threads: ONNX Runtime
#: 2458 against 1555 ms, OpenVINO f32 1621 against 1408, OpenVINO bf16 713 against 544), so such a candidate's best
#: run is more than 1.1x behind the leader's warm-up already.
CUTOFF = 1.8
#: A candidate whose warm-up run took more than this many times the fastest candidate's best timed run is not timed:
#: by the same bound (a first run at most 1.6x a later one), its best run would be more than 1.1x behind the leader's.
#: The candidates are timed fastest warm-up first, so the leader's best is usually known before the others are timed
#: (SAM ViT-B's blocks 0 and 2 on the Xeon with AMX hidden, 2 threads: OpenVINO f32's best 716-734 ms; BF16 warmed
#: up in 1328 ms and ONNX Runtime in 1408-1494, and their timed runs, 1105-1145 and 1193-1210 ms, were 1.1 s each of a
#: 15 s probe that could not change its choice). Only where the leader's best run is at least :data:`SHORT_RUN_MS`:
#: the bound was measured on runs of about a second, and a short run's first has a larger share of one-time work.
LEADER_CUTOFF = 1.6 * 1.1
#: Timed runs per candidate after its warm-up (the minimum is kept: the least disturbed run on a shared machine).
TIMED_RUNS = 2
#: A candidate whose timed run took more than this many times the fastest candidate's best so far is not run again:
#: another run cannot win it the choice (run-to-run noise on these machines is 10-25 %). SAM ViT-B's blocks 0 and 2
#: at 1024 on an AMD EPYC Zen 4, 2 threads: OpenVINO f32 1000-1113 ms and ONNX Runtime 1196 ms against OpenVINO
#: BF16's 538-550 ms, each timed twice before.
BEHIND = 1.5
#: A candidate whose warm-up took longer than this (ms) is timed once: a second run of seconds costs more than its
#: noise can change (SAM 2's memory attention over a full bank on an AMD EPYC Zen 4, 2 threads: 3-5 s a run, 58 s to
#: probe with two timed runs and the threads step, 28.5 s with one and without).
LONG_RUN_MS = 2000.0
#: The threads step (the fastest once more at half its threads) runs where this process's CPUs include SMT siblings,
#: or where the fastest run is shorter than this (ms): there thread start-up and synchronisation weigh, elsewhere one
#: thread per physical core is compute-bound and half of them only lose (AMD EPYC Zen 4, 2 cores, no SMT: SAM ViT-B's
#: cut-out blocks at 1024 on OpenVINO BF16 in 992-1075 against 533-591 ms, three probes; SAM 2's memory attention at
#: one thread warmed up in 7853 ms, against about 4 s a run at two).
SHORT_RUN_MS = 250.0
#: Metadata keys that say where the weights came from, not what the graph computes: two checkpoints of one
#: architecture share a decision.
_PROVENANCE = ("checkpoint", "checkpoint_sha256", "random_seed", "random_weights")
#: The name scopes the PyTorch exporter writes per node (``['', 'blocks.3', 'blocks.3.attn', ...]``).
_SCOPES_KEY = "pkg.torch.onnx.name_scopes"


def probe_enabled() -> bool:
    """Whether ``--runtime auto`` may probe (``VITDEPLOY_PROBE`` is not ``0``/``off``/``no``/``false``)."""
    return os.environ.get(PROBE_ENV, "1").strip().lower() not in ("0", "off", "no", "false")


@dataclass(frozen=True)
class Eligible:
    """The candidates a probe times for a file on this CPU, and what was left out, each with why."""

    candidates: tuple[Any, ...]  # Deployment
    left_out: tuple[str, ...] = ()


def eligible(metadata: dict[str, Any], features: CpuFeatures | None = None, installed: frozenset[str] | None = None,
             threads: int | None = None) -> Eligible:
    """The deployments to probe for a file with ``metadata`` (module docstring), most likely fastest first (a
    reduced policy, then OpenVINO, then ONNX Runtime: the order only makes the warm-up cutoff bite sooner)."""
    from vitdeploy.runtime.backends.deployment import Deployment

    features = features or cpu_features()
    if installed is None:
        installed = frozenset(name for name in ONNX_RUNTIMES if RUNTIMES[name].installed())
    threads = threads or available_cores()
    needs = FileNeeds.of(metadata)
    family = metadata.get("family")
    found, left_out = [], []
    for name in ONNX_RUNTIMES:
        entry = RUNTIMES[name]
        gap = entry.cpu_gap(needs)
        if name not in installed:
            left_out.append(f"{name}: not installed ({entry.install})")
            continue
        if gap:
            left_out.append(f"{name}: the file {gap}")
            continue
        found += [Deployment(name, "file", threads, form, source="probe") for form in attention_forms(metadata)
                  if all(key in entry.settings for key, _ in form)]
        for policy in entry.policies:
            if policy == "file":
                continue
            why = _policy_gap(policy, family, needs, features)
            if why:
                left_out.append(f"{name} {policy}: {why}")
            else:
                found.append(Deployment(name, policy, threads, (), source="probe"))
    found.sort(key=lambda d: (d.precision == "file", d.runtime == DEFAULT_RUNTIME))
    return Eligible(tuple(found), tuple(left_out))


def attention_forms(metadata: dict[str, Any]) -> list[tuple[tuple[str, Any], ...]]:
    """The runner settings of each attention form a file may run in: as written, and, where its target folds
    attention, ONNX Runtime's unfused and folded forms (a runtime takes the forms whose settings it has)."""
    from vitdeploy.targets import target_of

    target = target_of(metadata)
    forms: list[tuple[tuple[str, Any], ...]] = [()]
    if target is not None and target.folded_attention:
        forms += [(("fused_attention", False),), (("folded_attention", True),)]
    return forms


def _policy_gap(policy: str, family: str | None, needs: FileNeeds, features: CpuFeatures) -> str | None:
    """Why ``policy`` is not a candidate for a file of ``family`` on this CPU (None: it is): the file's precision,
    then the CPU's units, then the family's proof."""
    if needs.precision is not Precision.FP32:
        return f"the file is {needs.precision}, and a policy reduces FP32 files only"
    proof = PROVEN_POLICIES[policy]
    units = features.policy_units(policy)
    if not units:
        return f"this CPU has no {policy.upper()} units ({' or '.join(proof['units'])})"
    if family not in proof["families"]:
        proven = ", ".join(proof["families"]) or "no family yet"
        return f"this CPU has {' and '.join(units)}, but its parity budget is proven for {proven}, " \
               f"not for {family or 'a file without a family'}"
    return None


@dataclass
class ProbePart:
    """What a probe runs: ``path`` (the file itself, or a slice of it in a temporary folder), seeded ``feeds`` at the
    file's real shapes, and ``what`` in words (``blocks.0, blocks.2 of 12`` or ``the whole graph``)."""

    path: Path
    feeds: dict[str, np.ndarray]
    what: str


def _scopes(node: Any) -> list[str]:
    for prop in node.metadata_props:
        if prop.key == _SCOPES_KEY:
            try:
                value = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                return []
            return [s for s in value if isinstance(s, str)]
    return []


def file_bytes(model: str | Path) -> int:
    """The bytes of an ONNX file and of its external data file (``<name>.data``) where there is one."""
    model = Path(model)
    return sum(p.stat().st_size for p in (model, model.with_name(model.name + ".data")) if p.is_file())


def probe_part(model: str | Path, metadata: dict[str, Any], workdir: str | Path,
               whole_below: int = WHOLE_GRAPH_BYTES) -> ProbePart:
    """The part of ``model`` a probe runs (module docstring): the whole file when it is at most ``whole_below`` bytes
    or its family names no blocks, else the blocks its family names (:meth:`ModelFamily.probe_scopes`) cut out
    with every tensor that feeds them as an input, written with the file's metadata into ``workdir``."""
    import onnx

    from vitdeploy.engine.onnx_facts import read_onnx_facts
    from vitdeploy.families import FAMILIES

    model = Path(model)
    family = FAMILIES.get(metadata.get("family")) if isinstance(metadata.get("family"), str) else None
    size = file_bytes(model)
    scopes = family.probe_scopes(metadata) if family is not None else ()
    proto = onnx.load(str(model), load_external_data=size > whole_below and bool(scopes))
    if size > whole_below and scopes:
        part = _slice(proto, scopes)
        if part is not None:
            sliced, inputs, blocks, total = part
            path = Path(workdir) / "part.onnx"
            onnx.save(sliced, str(path))
            feeds = {}
            rng = np.random.default_rng(0)
            for value in inputs:
                dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
                dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
                feeds[value.name] = rng.standard_normal(dims).astype(dtype)
            named = ", ".join(".".join(b.rsplit(".", 2)[-2:]) for b in blocks)  # 'blocks.0, blocks.2'
            return ProbePart(path, feeds, f"{named} of {total} blocks, at the file's shapes")
    if family is None:
        raise InputError(f"'{model.name}' carries no vitdeploy model family: export it with 'vitdeploy export'")
    inputs = read_onnx_facts(model, proto).inputs
    shapes = {t.name: list(t.dims) for t in inputs}
    feeds = family.probe_feeds(metadata, list(shapes), shapes)
    return ProbePart(model, feeds, "the whole graph")


def _slice(proto: Any, scopes: tuple[str, ...]) -> tuple[Any, list[Any], tuple[str, ...], int] | None:
    """(the graph of the blocks named by ``scopes``, its inputs, the blocks, how many blocks the file has), or None
    where the file's nodes carry no such scopes or a block's boundary is not static (the caller then probes the whole
    graph). A scope ending in ``*`` (``trunk.blocks.*``) names one block of each kind the file has: blocks whose
    inputs have the same shapes and whose nodes are the same operators are one kind (a Hiera trunk's stages, their
    pooling transitions, windowed and global blocks)."""
    import onnx
    from onnx.utils import Extractor

    graph = proto.graph
    initializers = {t.name for t in graph.initializer}
    constants = {out for node in graph.node if node.op_type == "Constant" for out in node.output}
    consumers: dict[str, list[int]] = {}
    for index, node in enumerate(graph.node):
        for name in node.input:
            consumers.setdefault(name, []).append(index)
    scopes_of = _with_quantizer_scopes(graph, [_scopes(node) for node in graph.node], consumers)
    prefix = scopes[0].rstrip("*").rsplit(".", 1)[0] + "."  # 'blocks.'
    numbered = sorted({s for found in scopes_of for s in found if s.startswith(prefix) and s[len(prefix):].isdigit()},
                      key=lambda s: int(s[len(prefix):]))
    graph_outputs = {o.name for o in graph.output}

    def boundary(scope: str) -> tuple[set[int], list[str], list[str]]:
        members = {i for i, found in enumerate(scopes_of) if scope in found}
        made = {out for i in members for out in graph.node[i].output}
        ins, outs = [], []
        for i in sorted(members):
            for name in graph.node[i].input:
                if name and name not in made and name not in initializers and name not in constants and name not in ins:
                    ins.append(name)
            for name in graph.node[i].output:
                if name in graph_outputs or any(c not in members for c in consumers.get(name, [])):
                    outs.append(name)
        return members, ins, outs

    if scopes[0].endswith("*"):
        shapes = {v.name: tuple(d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim)
                  for v in [*graph.value_info, *graph.input]}
        kinds: dict[tuple, str] = {}
        for scope in numbered:
            members, ins, _ = boundary(scope)
            kind = (tuple(shapes.get(n) for n in ins), tuple(sorted(graph.node[i].op_type for i in members)))
            kinds.setdefault(kind, scope)
        scopes = tuple(kinds.values())
    inputs: list[str] = []
    outputs: list[str] = []
    made_inside: set[str] = set()
    for scope in scopes:
        members, ins, outs = boundary(scope)
        if not members:
            return None
        inputs += [n for n in ins if n not in inputs]
        outputs += [n for n in outs if n not in outputs]
        made_inside |= {out for i in members for out in graph.node[i].output}
    inputs = [n for n in inputs if n not in made_inside]  # consecutive blocks: one feeds the next inside the part
    try:
        sliced = Extractor(proto).extract_model(inputs, outputs)
    except Exception:  # noqa: BLE001 - onnx's own errors vary by version; the whole graph is the safe side
        return None
    values = [v for v in sliced.graph.input if v.name not in {t.name for t in sliced.graph.initializer}]
    if not scopes or any(not d.HasField("dim_value") for v in values for d in v.type.tensor_type.shape.dim):
        return None
    onnx.helper.set_model_props(sliced, {p.key: p.value for p in proto.metadata_props})
    return sliced, values, scopes, len(numbered)


#: Nodes 'calibrate -p int8' inserts (without the exporter's name scopes) in front of the node they quantize.
_QUANTIZERS = ("QuantizeLinear", "DequantizeLinear")


def _with_quantizer_scopes(graph: Any, scopes_of: list[list[str]], consumers: dict[str, list[int]]) -> list[list[str]]:
    """``scopes_of`` with each unscoped Q/DQ node given the scopes of the node it feeds (a DQ before a block's MatMul
    belongs to that block, and the Q before it too), so an INT8 file's blocks are cut whole as an FP32 file's are:
    without this, the DQ outputs inside a block became the part's inputs, and the probe ran SAM ViT-B's INT8 file
    whole (43.6 s on an AMD EPYC Zen 4). ONNX lists nodes in topological order, so one pass from the end gives each
    node its consumers' scopes first (a Q takes its DQ's, which took the MatMul's)."""
    for index in reversed(range(len(graph.node))):
        node = graph.node[index]
        if not scopes_of[index] and node.op_type in _QUANTIZERS:
            scopes_of[index] = next((scopes_of[c] for name in node.output for c in consumers.get(name, [])
                                     if scopes_of[c]), [])
    return scopes_of


@dataclass
class Timing:
    """One candidate on the probe part: its warm-up and best timed run (None: not timed further, or it failed), its
    cosine against the file's math on ONNX Runtime, and why it cannot be chosen (empty: it can)."""

    deployment: Any  # Deployment
    load_ms: float | None = None
    warmup_ms: float | None = None
    best_ms: float | None = None
    cosine: float | None = None
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.deployment.label(), "deployment": self.deployment.to_dict(), "load_ms": self.load_ms,
                "warmup_ms": self.warmup_ms, "best_ms": self.best_ms, "cosine": self.cosine, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Timing:
        """The timing :meth:`to_dict` wrote (the probe's worker to its parent)."""
        from vitdeploy.runtime.backends.deployment import Deployment

        return cls(Deployment.from_dict(data["deployment"], "probe"), data["load_ms"], data["warmup_ms"],
                   data["best_ms"], data["cosine"], data["reason"])


@dataclass
class Decision:
    """A probe's result: the chosen deployment, every timing, what ran and how long the probe took."""

    chosen: Any  # Deployment (None: no candidate held its budget, where the caller did not require a choice)
    timings: list[Timing]
    part: str
    seconds: float
    left_out: tuple[str, ...] = ()
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))

    def ranking(self) -> list[Timing]:
        """Choosable candidates, fastest first, then the rest."""
        return sorted(self.timings, key=lambda t: (bool(t.reason), t.best_ms if t.best_ms is not None else float("inf"),
                                                   t.warmup_ms if t.warmup_ms is not None else float("inf")))

    def summary(self) -> str:
        """``openvino bf16 (412 ms on blocks.0, blocks.2 of 12 ...; onnxruntime file 1534 ms, ...)``: the choice and why."""
        def ms(value: float) -> str:
            return f"{value:.0f} ms" if value >= 10 else f"{value:.2f} ms"

        several = len({t.deployment.threads for t in self.timings}) > 1

        def line(t: Timing) -> str:
            label = t.deployment.label() + (f" {t.deployment.threads} thr" if several else "")
            if t.reason:
                return f"{label} {t.reason}"
            if t.best_ms is None:
                return f"{label} left after a {ms(t.warmup_ms or 0)} warm-up"
            return f"{label} {ms(t.best_ms)}"

        times = ", ".join(line(t) for t in self.ranking())
        return f"probed on this CPU in {self.seconds:.1f} s on {self.part}: {times}"


def _compare(reference: dict[str, np.ndarray], got: dict[str, np.ndarray], budget: str) -> tuple[float, str]:
    from vitdeploy.parity import compare

    cosines, failures = [], []
    for name, value in reference.items():
        result = compare(value, got[name], budget, label=name)
        cosines.append(result.cosine)
        failures += result.failures
    return min(cosines), (f"over its '{budget}' budget against the file's math ({failures[0]})" if failures else "")


def _is_reference(deployment: Any) -> bool:
    """The file's own math on ONNX Runtime, as written: what every candidate's outputs are held against."""
    return deployment.runtime == DEFAULT_RUNTIME and deployment.precision == "file" and not deployment.settings


def _measure(model: Path, metadata: dict[str, Any], candidates: tuple[Any, ...], whole_below: int,
             on_start: Any = None, workdir: str | None = None, fewer_threads: bool = False,
             rank: bool = False) -> tuple[list[Timing], str]:
    """(every candidate's timing on the probe part of ``model``, in the order of ``candidates``; what the part is).

    Every candidate is opened and warmed up first, the reference (the file's math on ONNX Runtime, where it is a
    candidate) before the others: each other is held to its budget against it right after its own warm-up, and one
    that misses is closed and not timed. Those that held are then timed on the sessions their warm-ups ran (kept
    open, so none is loaded and warmed up twice: 2.6 s of SAM ViT-B's probe on the Zen 4), the fastest warm-up first,
    so the likely leader sets the bar the others are held to: one whose warm-up is behind the best by more than
    :data:`CUTOFF`, or behind the fastest best run so far by more than :data:`LEADER_CUTOFF`, is not timed, and a
    timed run :data:`BEHIND` the fastest so far is not repeated (on the Xeon with AMX hidden, timing in the eligible
    order put OpenVINO f32, the leader, third, and BF16 and FP16 ran their second runs before it: 2 s of a 15 s
    probe). ``fewer_threads``: then the fastest once more at half its threads (the threads axis, one candidate more),
    where it can win (:data:`SHORT_RUN_MS`). A candidate whose warm-up is longer than :data:`LONG_RUN_MS` is timed
    once. ``rank``: every candidate within :data:`CUTOFF`
    is timed, those behind the leader too (``tune`` judges the fastest few in full, not only the one that can win).
    ``on_start(i)`` is called before candidate ``i`` is opened (the extra one is ``len(candidates)``); the part is
    written into ``workdir`` (default: a temporary folder of its own)."""
    from vitdeploy.runtime.backends.base import RunnerOptions

    file_budget = Precision.of(metadata).value
    timings = [Timing(d) for d in candidates]
    reference: dict[str, np.ndarray] | None = None
    best_warmup = float("inf")

    def failed(timing: Timing, exc: Exception) -> None:
        """A runtime's own failure on one candidate rules out that candidate, in one line."""
        timing.reason = (f"could not run: {str(exc).splitlines()[0]}" if isinstance(exc, VitdeployError) else
                         f"could not run: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")

    def judged(index: int, timing: Timing, part: ProbePart) -> Any:
        """Open ``timing``'s candidate, warm it up and judge it (the reference is the judge): its runner, still open,
        where it ran and held its budget; None (closed, the reason recorded) where not."""
        nonlocal best_warmup, reference
        if on_start is not None:
            on_start(index)
        deployment = timing.deployment
        runner = None
        try:
            t0 = time.perf_counter()
            runner = RUNTIMES[deployment.runtime].open(
                part.path, RunnerOptions(threads=deployment.threads, policy=deployment.precision),
                **dict(deployment.settings))
            timing.load_ms = (time.perf_counter() - t0) * 1e3
            t0 = time.perf_counter()
            outputs = runner.run(part.feeds)
            timing.warmup_ms = (time.perf_counter() - t0) * 1e3
            if _is_reference(deployment) and reference is None:
                reference = outputs
            if reference is not None:
                budget = file_budget if deployment.precision == "file" else deployment.precision
                timing.cosine, timing.reason = _compare(reference, outputs, budget)  # over it: no speed makes up for it
        except Exception as exc:  # noqa: BLE001 - a runtime's own failure on one candidate rules out that candidate
            failed(timing, exc)
        if timing.reason:
            if runner is not None:
                runner.close()
            return None
        best_warmup = min(best_warmup, timing.warmup_ms)
        return runner

    def timed(timing: Timing, runner: Any, part: ProbePart) -> None:
        """Time a judged candidate on its warm ``runner`` where its warm-up is within the cutoffs; close the runner."""
        try:
            fastest = min((t.best_ms for t in timings if t.best_ms is not None and not t.reason), default=None)
            behind_leader = (not rank and fastest is not None and fastest >= SHORT_RUN_MS
                             and timing.warmup_ms > LEADER_CUTOFF * fastest)
            if timing.warmup_ms <= CUTOFF * best_warmup and not behind_leader:
                runs = timed_runs(lambda: runner.run(part.feeds), TIMED_RUNS if timing.warmup_ms < LONG_RUN_MS else 1,
                                  fastest)
                timing.best_ms = min(runs)
        except Exception as exc:  # noqa: BLE001 - as in judged
            failed(timing, exc)
        finally:
            runner.close()

    with tempfile.TemporaryDirectory(prefix="vitdeploy-probe-") as own:
        part = probe_part(model, metadata, workdir or own, whole_below)
        first = next((i for i, d in enumerate(candidates) if _is_reference(d)), None)
        order = ([first] if first is not None else []) + [i for i in range(len(candidates)) if i != first]
        warm = {}  # every candidate that held its budget, its runner still open
        try:
            for index in order:  # the reference first: its outputs judge the others
                if (runner := judged(index, timings[index], part)) is not None:
                    warm[index] = runner
            for index in sorted(warm, key=lambda i: timings[i].warmup_ms):  # the fastest warm-up first: the bar
                if on_start is not None:
                    on_start(index)  # a crash from here on is this candidate's
                timed(timings[index], warm.pop(index), part)
        finally:
            for runner in warm.values():
                runner.close()
        held = [t for t in timings if t.best_ms is not None and not t.reason]
        leader = min(held, key=lambda t: t.best_ms) if held else None
        if fewer_threads and leader and (leader.best_ms < SHORT_RUN_MS or _shares_cores()):
            fewer = replace(leader.deployment, threads=(leader.deployment.threads or 1) // 2)
            if fewer.threads and fewer not in candidates:
                timings.append(Timing(fewer))
                if (runner := judged(len(candidates), timings[-1], part)) is not None:
                    timed(timings[-1], runner, part)
    return timings, part.what


def timed_runs(run: Any, count: int, fastest_ms: float | None = None, clock: Any = None) -> list[float]:
    """Up to ``count`` timed runs of ``run`` (milliseconds each; ``clock`` default ``time.perf_counter``, read at the
    call); it stops after a run more than :data:`BEHIND` times ``fastest_ms`` (the fastest candidate's best so far):
    so far behind, another run cannot win the choice."""
    clock = clock or time.perf_counter
    runs: list[float] = []
    for _ in range(count):
        t0 = clock()
        run()
        runs.append((clock() - t0) * 1e3)
        if fastest_ms is not None and runs[-1] > BEHIND * fastest_ms:
            break
    return runs


def _shares_cores() -> bool:
    """Whether this process's CPUs include SMT siblings (or the topology cannot be read: then they may)."""
    physical = physical_cores()
    return physical is None or physical < available_cores()


def _measure_isolated(model: Path, candidates: tuple[Any, ...], whole_below: int,
                      fewer_threads: bool = False, rank: bool = False) -> tuple[list[Timing], str]:
    """:func:`_measure` in a worker process (``python -m vitdeploy.runtime.backends.probe``): a runtime that crashes
    the process on a candidate (a native fault) rules out that candidate instead of ending the user's program, and
    the parsed graph and each candidate's sessions never count toward the user's process's memory. After a crash the
    worker runs again without the candidate it was on."""
    import signal
    import subprocess

    remaining = list(range(len(candidates)))
    crashed: dict[int, str] = {}
    done: dict[str, Any] | None = None
    while remaining:
        with tempfile.TemporaryDirectory(prefix="vitdeploy-probe-") as workdir:  # removed even when the worker crashed
            spec = {"model": str(model), "whole_below": whole_below, "workdir": workdir, "fewer_threads": fewer_threads,
                    "rank": rank, "candidates": [candidates[i].to_dict() for i in remaining]}
            worker = subprocess.run([sys.executable, "-m", "vitdeploy.runtime.backends.probe"], input=json.dumps(spec),
                                    capture_output=True, text=True)
        lines = [json.loads(line) for line in worker.stdout.splitlines() if line.startswith("{")]
        done = next((line["result"] for line in lines if "result" in line), None)
        if worker.returncode == 0 and done is not None:
            break
        started = [line["start"] for line in lines if "start" in line]
        tail = (worker.stderr.strip().splitlines() or ["no output"])[-1][:200]
        if not started:
            raise InputError(f"the probe's worker stopped before it ran a candidate ({tail})")
        try:
            how = f"signal {signal.Signals(-worker.returncode).name}" if worker.returncode < 0 else f"exit {worker.returncode}"
        except ValueError:
            how = f"exit {worker.returncode}"
        if started[-1] == len(remaining):  # the threads step: the next run leaves it out
            fewer_threads = False
            continue
        crashed[remaining[started[-1]]] = f"could not run: it ended the probe's worker process ({how}: {tail})"
        del remaining[started[-1]]
        done = None
    measured = iter([Timing.from_dict(data) for data in done["timings"]] if done else [])
    # the candidates in their order, the crashed ones among them; then the threads step's candidate, if it ran
    timings = [Timing(d, reason=crashed[i]) if i in crashed else next(measured) for i, d in enumerate(candidates)]
    return timings + list(measured), (done["part"] if done else "nothing (every candidate ended the worker)")


def probe(model: str | Path, metadata: dict[str, Any] | None = None, *, threads: int | None = None,
          features: CpuFeatures | None = None, whole_below: int = WHOLE_GRAPH_BYTES,
          candidates: Eligible | None = None, require_choice: bool = True, isolate: bool = False,
          fewer_threads: bool | None = None, rank: bool = False) -> Decision:
    """Time every eligible candidate (:func:`eligible`) on the probe part of ``model`` and choose the fastest that
    holds its budget (module docstring); ``isolate``: in a worker process (:func:`_measure_isolated`);
    ``fewer_threads``: the threads step, the leader once more at half its threads where that can win (default: for the
    eligible candidates, not for a caller's own, which carry their thread counts); ``rank``: time every candidate
    within the warm-up cutoff, not only those that can still win (:func:`_measure`). Raises InputError where no candidate ran to
    the end and held its budget (``require_choice``; without it the decision's ``chosen`` is then None)."""
    from vitdeploy.metadata import read_onnx_metadata

    model = Path(model)
    metadata = metadata if metadata is not None else read_onnx_metadata(model)
    features = features or cpu_features()
    found = candidates or eligible(metadata, features, threads=threads)
    if not found.candidates:
        raise InputError(f"no runtime here runs '{model.name}' on the CPU ({'; '.join(found.left_out)})")
    start = time.perf_counter()
    fewer = candidates is None if fewer_threads is None else fewer_threads
    if isolate:
        timings, part = _measure_isolated(model, found.candidates, whole_below, fewer, rank)
    else:
        timings, part = _measure(model, metadata, found.candidates, whole_below, fewer_threads=fewer, rank=rank)
    choosable = [t for t in timings if not t.reason and t.best_ms is not None]
    seconds = time.perf_counter() - start
    if not choosable and not require_choice:
        return Decision(None, timings, part, seconds, found.left_out)
    if not choosable:
        raise InputError(f"the probe ran no candidate of '{model.name}' to the end: "
                         + "; ".join(f"{t.deployment.label()}: {t.reason}" for t in timings))
    chosen = min(choosable, key=lambda t: t.best_ms).deployment
    return Decision(chosen, timings, part, seconds, found.left_out)


def _worker() -> None:
    """The worker :func:`_measure_isolated` starts: reads its spec on standard input, says which candidate it starts
    (``{"start": i}``, one line each, flushed), then writes every timing (``{"result": ...}``)."""
    from vitdeploy.metadata import read_onnx_metadata
    from vitdeploy.runtime.backends.deployment import Deployment

    spec = json.loads(sys.stdin.read())
    model = Path(spec["model"])
    candidates = tuple(Deployment.from_dict(d, "probe") for d in spec["candidates"])

    def started(index: int) -> None:
        print(json.dumps({"start": index}), flush=True)

    timings, part = _measure(model, read_onnx_metadata(model), candidates, spec["whole_below"], started, spec["workdir"],
                             spec["fewer_threads"], spec["rank"])
    print(json.dumps({"result": {"part": part, "timings": [t.to_dict() for t in timings]}}), flush=True)


# -- the cache --------------------------------------------------------------------------------------------------------


def props_digest(model: str | Path) -> str:
    """SHA-256 of the file's ``vitdeploy.*`` metadata entries as written, without the weights' provenance: the lines
    ``key=value`` in key order, joined by newlines (UTF-8). The C++ library computes the same from the same bytes
    (``cpp/src/deployment.cpp``), so both match a cached decision to a file alike."""
    from vitdeploy.metadata import PREFIX, read_metadata_props

    lines = [f"{k}={v}" for k, v in sorted(read_metadata_props(model).items())
             if k.startswith(PREFIX) and k[len(PREFIX):] not in _PROVENANCE]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def file_identity(model: str | Path, metadata: dict[str, Any]) -> dict[str, Any]:
    """What a decision depends on of the file: its vitdeploy metadata without the weights' provenance (decoded, for
    the reader; and the digest of the entries as written, what both languages match on), and its size."""
    return {"metadata": {k: v for k, v in sorted(metadata.items()) if k not in _PROVENANCE},
            "props_sha256": props_digest(model), "bytes": file_bytes(model)}


def decision_key(model: str | Path, metadata: dict[str, Any], threads: int,
                 features: CpuFeatures | None = None) -> dict[str, Any]:
    """Everything a cached decision must match to be read: machine, runtime versions, threads and the file."""
    from vitdeploy.runtime.backends.deployment import machine_fingerprint, runtime_versions

    return {"machine": machine_fingerprint(features), "runtime_versions": runtime_versions(), "threads": threads,
            "file": file_identity(model, metadata)}


def _as_json(key: dict[str, Any]) -> Any:
    """``key`` as it reads back from a decision file (tuples as lists, keys in order): what a cached key is compared
    with, and what its file name is hashed from."""
    return json.loads(json.dumps(key, sort_keys=True, default=str))


def decision_path(key: dict[str, Any], make: bool = True) -> Path | None:
    """``<cache>/decisions/<family>-<sha256 of the key>.json`` (None where the cache is off or cannot be made)."""
    from vitdeploy.fileio import user_cache_dir

    folder = user_cache_dir("decisions", make=make)
    if folder is None:
        return None
    digest = hashlib.sha256(json.dumps(_as_json(key), sort_keys=True).encode()).hexdigest()[:32]
    family = key["file"]["metadata"].get("family") or "model"
    return folder / f"{family}-{digest}.json"


def read_decision(path: Path, key: dict[str, Any]) -> Any | None:
    """The deployment cached at ``path`` if it was decided for exactly ``key`` (else None: probe again). A damaged
    or hand-edited decision is not trusted (the deployment is held to what a profile may hold)."""
    from vitdeploy.runtime.backends.deployment import Deployment

    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or data.get("format") != DECISION_FORMAT or data.get("key") != _as_json(key):
        return None
    try:
        chosen = Deployment.from_dict(data.get("chosen"), f"'{path}'")
    except InputError:
        return None
    return replace(chosen, source=f"probe, cached {path} ({data.get('created', '')}): {data.get('summary', '')}")


def write_decision(path: Path, key: dict[str, Any], decision: Decision) -> None:
    """Write ``decision`` whole or not at all (a concurrent probe of the same file writes the same key)."""
    from vitdeploy.fileio import atomic_write_bytes

    data = {"format": DECISION_FORMAT, "created": decision.created, "key": _as_json(key),
            "chosen": decision.chosen.to_dict(), "chosen_label": decision.chosen.label(), "part": decision.part,
            "seconds": round(decision.seconds, 2), "summary": decision.summary(), "left_out": list(decision.left_out),
            "timings": [t.to_dict() for t in decision.ranking()]}
    try:
        atomic_write_bytes(path, (json.dumps(data, indent=2) + "\n").encode())
    except OSError:  # a read-only cache: the decision holds for this process, and the next probes again
        pass


def cached_decisions(features: CpuFeatures | None = None) -> list[dict[str, Any]]:
    """The decisions cached for this machine and these runtime versions (others in the folder are for another CPU or
    version, and are never read), newest first: each the file's metadata, the choice, when and how long it took."""
    from vitdeploy.fileio import user_cache_dir
    from vitdeploy.runtime.backends.deployment import machine_fingerprint, runtime_versions

    folder = user_cache_dir("decisions", make=False)
    if folder is None or not folder.is_dir():
        return []
    here = _as_json({"machine": machine_fingerprint(features), "runtime_versions": runtime_versions()})
    found = []
    for path in folder.glob("*.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if not isinstance(data, dict) or data.get("format") != DECISION_FORMAT or not isinstance(data.get("key"), dict):
            continue  # not a decision this vitdeploy wrote
        key = data["key"]
        if any(key.get(k) != v for k, v in here.items()):
            continue
        found.append({"path": str(path), "metadata": key.get("file", {}).get("metadata", {}), "threads": key.get("threads"),
                      "chosen": data.get("chosen_label"), "created": data.get("created"), "seconds": data.get("seconds"),
                      "part": data.get("part")})
    return sorted(found, key=lambda d: str(d["created"]), reverse=True)


_SAID: set[str] = set()


def decide(model: str | Path, metadata: dict[str, Any], threads: int | None = None,
           features: CpuFeatures | None = None) -> Any:
    """The deployment ``--runtime auto`` opens ``model`` with where no profile fits: the cached decision for this
    machine and file, else a probe's (cached, and said once on standard error)."""
    threads = threads or available_cores()
    key = decision_key(model, metadata, threads, features)
    path = decision_path(key)
    if path is not None and path.is_file():
        cached = read_decision(path, key)
        if cached is not None:
            return cached
    decision = probe(model, metadata, threads=threads, features=features, isolate=True)
    where = ""
    if path is not None:
        write_decision(path, key, decision)
        where = f"; cached {path}"
    chosen = decision.chosen
    source = f"{decision.summary()}{where}"
    line = (f"vitdeploy: {Path(model).name} runs on {chosen.label()} ({source}); {PROBE_ENV}=0 skips the probe, "
            "'vitdeploy tune' gates full candidates")
    if line not in _SAID:
        _SAID.add(line)
        print(line, file=sys.stderr)
    return replace(chosen, source=f"probe: {source}")


__all__ = ["BEHIND", "CUTOFF", "DECISION_FORMAT", "LEADER_CUTOFF", "LONG_RUN_MS", "SHORT_RUN_MS", "PROBE_ENV",
           "WHOLE_GRAPH_BYTES", "Decision", "Eligible", "ProbePart", "Timing", "timed_runs",
           "cached_decisions", "decide", "decision_key", "decision_path", "eligible", "file_identity", "probe", "probe_enabled", "probe_part",
           "read_decision", "write_decision"]


if __name__ == "__main__":
    _worker()
