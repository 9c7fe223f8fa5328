"""The first-use probe: which eligible deployment of a file is fastest on this machine, measured here, in seconds.

``--runtime auto`` without a deployment profile asks :func:`decide`. The numerics and the speed are decided apart:

* **Eligible** (:func:`~vitdeploy.runtime.deploy.candidates.eligible`) is a question of numerics and units, answered without timing anything: every CPU
  runtime installed here that runs the file (the registry's ``cpu_gap``), the file's own math on each, ONNX Runtime's
  attention forms where the file's target folds attention, and a reduced precision policy only where its parity
  budget is proven for the file's family (``proven_policies`` in ``vitdeploy/data/runtime_facts.json``, each with the
  measurement that proves it) and this CPU has the units for it (BF16: AMX or AVX512-BF16). What is left out is said,
  with why.
* **Fastest** is measured on this machine (:func:`probe`): each candidate runs, at every core this process may use
  (then the fastest once more at half of them, where SMT siblings or a short run may favour fewer), a
  representative part of the real graph at the file's real shapes (:func:`~vitdeploy.runtime.deploy.graph_part.probe_part`: for a large file, the blocks
  its family names, e.g. one windowed and one global block of a SAM encoder; a small file whole). A candidate whose
  warm-up run is far behind the best one's is not timed further.
  Each candidate's outputs on the part are held to its budget against the file's math on ONNX Runtime, so a
  runtime's fault cannot win on speed. ``--runtime auto``'s probe runs in a worker process: a runtime that crashes on
  a candidate (a native fault: under qemu, probing the tiny SAM decoder ended 'predict' with SIGSEGV) rules out that
  candidate instead of ending the user's program, and the probe's memory is not the program's
  (:mod:`~vitdeploy.runtime.deploy.timing`).

The decision is cached (:mod:`~vitdeploy.runtime.deploy.decisions`) per machine in the user's cache folder (``$VITDEPLOY_CACHE_DIR/decisions``), keyed by what it
depends on: the CPU (model name, family/model, the flags that pick kernels, the cores), the installed runtimes'
versions, the threads and the file's identity (its vitdeploy metadata without the weights' provenance, and its size),
so two checkpoints of one architecture share one probe and a decision for another CPU or runtime version is never
read. ``VITDEPLOY_PROBE=0`` turns the probe off (the documented per-CPU rows of ``runtime_facts.json`` then apply);
``--runtime onnxruntime|openvino`` bypasses the whole choice.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from vitdeploy.cpu_features import CpuFeatures, available_cores, cpu_features
from vitdeploy.errors import InputError
from vitdeploy.runtime.deploy.candidates import Eligible, eligible
from vitdeploy.runtime.deploy.decisions import decision_key, decision_path, read_decision, write_decision
from vitdeploy.runtime.deploy.deployment import Deployment
from vitdeploy.runtime.deploy.graph_part import WHOLE_GRAPH_BYTES
from vitdeploy.runtime.deploy.timing import Decision, measure, measure_isolated

#: ``VITDEPLOY_PROBE=0`` (or ``off``/``no``/``false``) turns the first-use probe off.
PROBE_ENV = "VITDEPLOY_PROBE"


def probe_enabled() -> bool:
    """Whether ``--runtime auto`` may probe (``VITDEPLOY_PROBE`` is not ``0``/``off``/``no``/``false``)."""
    return os.environ.get(PROBE_ENV, "1").strip().lower() not in ("0", "off", "no", "false")


def probe(model: str | Path, metadata: dict[str, Any] | None = None, *, threads: int | None = None,
          features: CpuFeatures | None = None, whole_below: int = WHOLE_GRAPH_BYTES,
          candidates: Eligible | None = None, require_choice: bool = True, isolate: bool = False,
          fewer_threads: bool | None = None, rank: bool = False) -> Decision:
    """Time every eligible candidate (:func:`eligible`) on the probe part of ``model`` and choose the fastest that
    holds its budget (module docstring); ``isolate``: in a worker process (:func:`~vitdeploy.runtime.deploy.timing.measure_isolated`);
    ``fewer_threads``: the threads step, the leader once more at half its threads where that can win (default: for the
    eligible candidates, not for a caller's own, which carry their thread counts); ``rank``: time every candidate
    within the warm-up cutoff, not only those that can still win (:func:`~vitdeploy.runtime.deploy.timing.measure`). Raises InputError where no
    candidate ran to the end and held its budget (``require_choice``; without it the decision's ``chosen`` is then None)."""
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
        timings, part = measure_isolated(model, found.candidates, whole_below, fewer, rank)
    else:
        timings, part = measure(model, metadata, found.candidates, whole_below, fewer_threads=fewer, rank=rank)
    choosable = [t for t in timings if not t.reason and t.best_ms is not None]
    seconds = time.perf_counter() - start
    if not choosable and not require_choice:
        return Decision(None, timings, part, seconds, found.left_out)
    if not choosable:
        raise InputError(f"the probe ran no candidate of '{model.name}' to the end: "
                         + "; ".join(f"{t.deployment.label()}: {t.reason}" for t in timings))
    chosen = min(choosable, key=lambda t: t.best_ms).deployment
    return Decision(chosen, timings, part, seconds, found.left_out)


_SAID: set[str] = set()


def decide(model: str | Path, metadata: dict[str, Any], threads: int | None = None,
           features: CpuFeatures | None = None) -> Deployment:
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


__all__ = ["PROBE_ENV", "decide", "probe", "probe_enabled"]
