"""One plan per model: a :class:`~vitdeploy.runtime.deploy.deployment.Deployment` for each file, every file decided,
made once and carried as it is to every route.

A :class:`ModelPlan` is plain data (``to_dict``/``from_dict`` round-trip it through JSON, Ray and a worker's
config): which file plays which role, how each runs (the encoder's precision policy is the user's; a decoder, a
text encoder, a detector or a memory graph is decided on its own, never run as written by default), and where
(device, GPU, TF32). It is made from files an application checked belong together
(:class:`vitdeploy.runtime.apps.common.files.ModelFiles`); predictors, verbs, dataset workers, Ray Serve replicas
and the server open their runners from it and decide nothing again, so a profile's or the probe's choice for any
file reaches every route alike.

Threads per worker are decided here too (:func:`worker_threads`): in one process a file runs on its deployment's
threads (the profile's, else every core this process may use); a worker of a pool (a Ray actor, a Ray Serve
replica) runs one thread unless asked, and its files are decided for that count.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vitdeploy.errors import InputError
from vitdeploy.runtime.backends.base import Runner
from vitdeploy.runtime.deploy.deployment import Deployment
from vitdeploy.runtime.deploy.loader import OpenOptions, decide, open_deployed

#: The plan's format tag, in its dictionary form (a reader refuses any other).
PLAN_FORMAT = "vitdeploy-model-plan/1"


def worker_threads(asked: int | None, pooled: bool) -> int | None:
    """The threads each worker's files are decided for, the one rule every route follows: what was asked; else, in a
    pool of workers (Ray actors, Ray Serve replicas: they share the machine), one; else None (one process: ``auto``
    decides, its profile's threads or every core this process may use; an asked runtime runs every core this
    process may use: :func:`verb_threads`)."""
    return asked or (1 if pooled else None)


def verb_threads(runtime: str, asked: int | None) -> int | None:
    """The threads a verb in one process opens its files with: as asked; with ``--runtime auto`` None (the deployment
    decides: its profile's, else every core); else every core this process may use."""
    from vitdeploy.cpu_features import available_cores
    from vitdeploy.runtime.deploy.deployment import AUTO

    return asked or (None if runtime == AUTO else available_cores())


@dataclass(frozen=True)
class PlannedFile:
    """One file of a plan: its role in the model (``encoder``, ``decoder``, ``detector``, ...), its path, how it runs,
    and whether ``auto`` chose that (the runner's ``deployment`` then says what and why)."""

    role: str
    path: str
    deployment: Deployment
    chosen: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "path": self.path, "deployment": self.deployment.to_dict(),
                "source": self.deployment.source, "chosen": self.chosen}

    @classmethod
    def from_dict(cls, data: Any) -> PlannedFile:
        if not isinstance(data, dict) or not isinstance(data.get("role"), str) or not isinstance(data.get("path"), str):
            raise InputError(f"a planned file is damaged ({json.dumps(data, default=str)[:120]}): plan the model again")
        deployment = Deployment.from_dict(data.get("deployment"), f"the plan of '{Path(data['path']).name}'")
        return cls(data["role"], data["path"], replace(deployment, source=str(data.get("source", deployment.source))),
                   bool(data.get("chosen", True)))


@dataclass(frozen=True)
class ModelPlan:
    """How every file of one model runs (module docstring).

    Attributes:
        model: what the files make, in words (``SAM's image encoder and decoder``).
        files: the planned files, in the model's order of roles.
        device, gpu, tf32, allow_unverified: where they run (:class:`~vitdeploy.runtime.deploy.loader.OpenOptions`).
    """

    model: str
    files: tuple[PlannedFile, ...]
    device: str = "cpu"
    gpu: int = 0
    tf32: bool = False
    allow_unverified: bool = False
    format: str = field(default=PLAN_FORMAT, repr=False)

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(f.role for f in self.files)

    def __contains__(self, role: str) -> bool:
        return role in self.roles

    def __getitem__(self, role: str) -> PlannedFile:
        for planned in self.files:
            if planned.role == role:
                return planned
        raise KeyError(f"the plan of {self.model} has no {role} (it has {', '.join(self.roles)})")

    def open(self, role: str) -> Runner:
        """The runner of ``role``'s file, opened as planned (nothing is decided again)."""
        planned = self[role]
        runner = open_deployed(planned.path, planned.deployment, device=self.device, gpu=self.gpu, tf32=self.tf32,
                               allow_unverified=self.allow_unverified)
        runner.deployment = planned.deployment if planned.chosen else None
        return runner

    def with_threads(self, threads: int) -> ModelPlan:
        """The plan with ``threads`` for each file whose deployment leaves them to the runtime (an asked runtime):
        a job in one process runs every core this process may use, as its verb says."""
        return replace(self, files=tuple(f if f.deployment.threads is not None else
                                         replace(f, deployment=replace(f.deployment, threads=threads))
                                         for f in self.files))

    def lines(self) -> list[str]:
        """``encoder.onnx runs as openvino bf16, 2 thread(s): probe ...``, a line per file."""
        return [f"{Path(f.path).name} runs as {f.deployment.describe()}" for f in self.files]

    def to_dict(self) -> dict[str, Any]:
        return {"format": self.format, "model": self.model, "files": [f.to_dict() for f in self.files],
                "device": self.device, "gpu": self.gpu, "tf32": self.tf32, "allow_unverified": self.allow_unverified}

    @classmethod
    def from_dict(cls, data: Any) -> ModelPlan:
        """The plan :meth:`to_dict` wrote (a worker's copy of the driver's), its deployments held to what a profile may
        hold (:meth:`Deployment.from_dict`)."""
        if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT or not isinstance(data.get("files"), list):
            raise InputError(f"not a vitdeploy model plan (format {PLAN_FORMAT}): plan the model again")
        return cls(str(data.get("model", "")), tuple(PlannedFile.from_dict(f) for f in data["files"]),
                   str(data.get("device", "cpu")), int(data.get("gpu", 0)), bool(data.get("tf32", False)),
                   bool(data.get("allow_unverified", False)))


def plan_files(model: str, paths: dict[str, str | Path], options: OpenOptions, primary: str | None = None,
               parts: OpenOptions | None = None) -> ModelPlan:
    """Decide each file of ``paths`` (role -> path, in the model's order) as ``options`` say: ``primary`` (default:
    the first role) with the options' precision policy, every other file with its own deployment's
    (``parts``, default :meth:`OpenOptions.for_part`: the options without the policy). Each file is decided once,
    here."""
    primary = primary if primary is not None else next(iter(paths), None)
    parts = parts if parts is not None else options.for_part()
    files = []
    for role, path in paths.items():
        deployment, chosen = decide(path, options if role == primary else parts)
        files.append(PlannedFile(role, str(path), deployment, chosen))
    return ModelPlan(model, tuple(files), options.device, options.gpu, options.tf32, options.allow_unverified)


__all__ = ["PLAN_FORMAT", "ModelPlan", "PlannedFile", "plan_files", "verb_threads", "worker_threads"]
