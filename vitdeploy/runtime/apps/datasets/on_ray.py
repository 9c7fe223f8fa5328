"""A dataset job on Ray Data: the same shards and the same worker as in one process, on a cluster's actors.

``--ray`` starts a local Ray cluster for the command (every core of this machine); ``--ray ADDRESS``
(``auto``, ``ray://host:10001``, ``host:6379``) joins an existing one. The shards become a Ray dataset (one
block each); ``map_batches`` runs them on a pool of ``workers`` actors, each holding one loaded model
(:class:`~vitdeploy.runtime.apps.datasets.job.ShardWorker`) with ``threads`` intra-op threads and as many
CPUs reserved (one GPU each on ``--device cuda``). Each actor reads its shard's images itself (streamed:
nothing passes through the driver but the shard files' bytes), and the driver commits results as they
stream back, in whatever order they finish: the manifest is sorted when the job ends.

Faults: Ray Data restarts a dead actor and retries its shard (``max_restarts``/``max_task_retries`` are
unbounded for actor pools); the driver commits each shard once, when its result arrives, so a shard run
twice is written once. On a cluster, the images, the model files and the output folder must be at the
same paths on every node (shared storage); the output folder is written by the driver only.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from vitdeploy.errors import InputError
from vitdeploy.runtime.apps.datasets.job import JobConfig, JobPlan, ShardWorker
from vitdeploy.runtime.apps.datasets.store import ShardResult

#: ``--ray`` without an address: start a local cluster for this command.
LOCAL = "local"


class RayShardWorker:
    """The Ray Data actor: one :class:`ShardWorker`; a batch is one shard (``{"shard": [json]}``)."""

    def __init__(self, config: dict[str, Any]):
        self.worker = ShardWorker(JobConfig.from_dict(config))

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        entries, payloads = [], []
        for shard in batch["shard"]:
            result = self.worker.run(json.loads(str(shard)))
            entries.append(json.dumps(result.entry))
            payloads.append(result.payload)
        return {"entry": np.array(entries, dtype=object),
                "payload": np.array([p if p is not None else b"" for p in payloads], dtype=object),
                "has_payload": np.array([p is not None for p in payloads])}


def start_ray(address: str, cores: int | None = None) -> bool:
    """Connect to ``address`` (or start a local cluster with ``cores`` CPUs for :data:`LOCAL`); True if we started Ray
    here (and so shut it down at the end). Ray's core worker replaces the process's SIGTERM/SIGINT handlers with its
    own (SIGTERM then aborted with exit 134, a native stack dump and agents left running): the Python handlers in
    place before are put back."""
    try:
        import ray
    except ImportError as exc:
        raise InputError("--ray needs Ray: pip install 'vitdeploy[ray]' (or leave out --ray to run in this process)") from exc
    if ray.is_initialized():
        return False
    quiet = logging.getLogger().getEffectiveLevel() > logging.INFO
    # Ray's start-up and Ray Data's execution lines are for Ray's own users; the verb prints its own progress.
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": not quiet,
                              "logging_level": logging.ERROR if quiet else logging.INFO}
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}

    try:
        if address == LOCAL:
            ray.init(num_cpus=cores, **kwargs)
        else:
            ray.init(address=address, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        _restore(handlers)
        raise InputError(f"cannot reach the Ray cluster at '{address}' ({type(exc).__name__}: {str(exc).splitlines()[0][:160]}): "
                         "check the address ('ray status' on the head node), or use --ray alone for a local cluster") from exc
    _restore(handlers)
    return True


def _restore(handlers: dict[int, Any]) -> None:
    """Put the Python signal handlers back (each again at the C level, where Ray's replaced them); main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum, handler in handlers.items():
        if handler is not None:
            signal.signal(signum, handler)


def cluster_cpus() -> int:
    import ray

    return int(ray.cluster_resources().get("CPU", 1))


def run_on_ray(plan: JobPlan, workers: int) -> Iterator[ShardResult]:
    """Each shard's result as its actor finishes it (Ray must be started: :func:`start_ray`)."""
    import ray.data

    if not plan.shards:
        return
    if logging.getLogger().getEffectiveLevel() > logging.INFO:
        logging.getLogger("ray.data").setLevel(logging.ERROR)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # the verb draws its own, per committed image
    context.print_on_execution_start = False
    config = plan.config
    shards = ray.data.from_items([{"shard": json.dumps(s)} for s in plan.shards], override_num_blocks=len(plan.shards))
    resources = {"num_gpus": 1} if config.device == "cuda" else {}
    pool = ray.data.ActorPoolStrategy(size=max(1, min(workers, len(plan.shards))))
    results = shards.map_batches(RayShardWorker, fn_constructor_kwargs={"config": config.to_dict()}, batch_size=1,
                                 compute=pool, num_cpus=config.threads or 1, **resources)
    for row in results.iter_rows():
        payload = bytes(row["payload"]) if row["has_payload"] else None
        yield ShardResult(json.loads(row["entry"]), payload)


def stop_ray() -> None:
    import ray

    ray.shutdown()


__all__ = ["LOCAL", "RayShardWorker", "cluster_cpus", "run_on_ray", "start_ray", "stop_ray"]
