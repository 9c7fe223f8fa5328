"""The deployment wing: between a user naming files and a runner per file, how each file runs on this machine.

    deployment   ``Deployment``: how one file runs (runtime, precision policy, runner settings, threads) and why
    auto         ``resolve``: ``--runtime auto``'s choice, in its order (a profile, the probe, this CPU's rows);
                 ``explain``: that order said without a file (``vitdeploy doctor``)
    profiles     deployment profiles ``vitdeploy tune`` writes beside a file, matched to the file and the machine
    cpu_rows     this CPU's measured rows (the choice with the probe off) and what INT8 measured against them
    identity     what a profile or decision depends on: the file's bytes and metadata, the machine, the versions
    probe        the first-use probe: ``decide`` (cached) and ``probe`` (measured), on
    candidates   which deployments are candidates (numerics and units; ``tune`` adds its ``Grid`` on top),
    graph_part   the part of the graph a probe runs (blocks cut out at the file's shapes),
    timing       the timing harness (warm-up, judging, timing, a worker process; the package's one timing loop)
    decisions    and the cache of decisions per machine
    loader       ``OpenOptions``, ``open_runner``, ``open_deployed``: the one seam that opens a deployed file

A wing of ``vitdeploy.runtime`` above the runners (``runtime.backends``) and below the applications (``runtime.apps``),
in ``vitdeploy.LAYERS``. Its names load their module on first use.
"""

from vitdeploy._lazy import lazy_attributes

_WHERE = {
    "AUTO": "deployment",
    "Deployment": "deployment",
    "resolve": "auto",
    "explain": "auto",
    "decide": "probe",
    "probe": "probe",
    "probe_enabled": "probe",
    "eligible": "candidates",
    "Grid": "candidates",
    "profile_path": "profiles",
    "read_profile": "profiles",
    "cpu_default": "cpu_rows",
    "model_digest": "identity",
    "OpenOptions": "loader",
    "as_runner": "loader",
    "open_deployed": "loader",
    "open_runner": "loader",
}
__getattr__ = lazy_attributes(__name__, _WHERE)
__all__ = sorted(_WHERE)
