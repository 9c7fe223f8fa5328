"""Option groups: options defined once and parsed into one typed value, so that a verb takes a few values, not a
parameter per flag (Polygraphy's argument groups, ``tools/args/``, are the model).

:func:`option_group` attaches a group's click options to a verb and hands the verb one instance of the group's
dataclass (its fields are the options' parameter names) under the group's name. The groups every deploying verb
shares:

    deploy       how the files run: ``--runtime``, ``--inference-precision``, ``--threads`` and, where the verb
                 takes them, ``--device``, ``--tf32``, ``--allow-unverified``, the attention forms -> :class:`Deploy`
    job          a dataset job: ``--images``, ``--out-dir``, ``--shard-size``, ``--ray``, ``--workers`` -> :class:`Job`
    outputs      ``--report`` and ``--force`` -> :class:`Outputs`

A verb's own groups (the mask generator's settings, a track's prompts) are made with the same call beside it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vitdeploy.runtime.deploy.deployment import AUTO


def option_group(name: str, kind: type, *options: Callable) -> Callable:
    """A decorator adding ``options`` (click options, or decorators adding several) to a verb, whose values reach it
    as one ``kind`` under ``name``: ``kind`` is a dataclass whose fields are the options' parameter names (a field
    without its option here takes its default)."""
    names = [field.name for field in dataclasses.fields(kind)]

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            kwargs[name] = kind(**{key: kwargs.pop(key) for key in names if key in kwargs})
            return fn(*args, **kwargs)

        for option in reversed(options):
            wrapper = option(wrapper)
        return wrapper

    return decorate


@dataclass(frozen=True)
class Deploy:
    """How a verb's files run, as the options said (``threads`` None where not given)."""

    runtime: str = AUTO
    inference_precision: str | None = None
    threads: int | None = None
    device: str = "cpu"
    tf32: bool = False
    allow_unverified: bool = False
    fused_attention: bool | None = None
    folded_attention: bool = False

    def options(self, *, in_process: bool = True) -> Any:
        """The :class:`~vitdeploy.runtime.deploy.loader.OpenOptions` every file is opened with: in this process with
        the threads of :func:`~vitdeploy.runtime.deploy.plan.verb_threads` (as given; with ``auto`` the deployment's;
        else every core), for a job's workers as given (the job decides them per worker)."""
        from vitdeploy.runtime.deploy.loader import OpenOptions
        from vitdeploy.runtime.deploy.plan import verb_threads

        threads = verb_threads(self.runtime, self.threads) if in_process else self.threads
        return OpenOptions(runtime=self.runtime, policy=self.inference_precision, threads=threads, device=self.device,
                           tf32=self.tf32, allow_unverified=self.allow_unverified,
                           fused_attention=self.fused_attention, folded_attention=self.folded_attention)

    def predictor_keywords(self) -> dict[str, Any]:
        """The keywords a predictor (``open_sam_predictor``) takes, with this process's threads."""
        o = self.options()
        keywords = {"device": o.device, "threads": o.threads, "runtime": o.runtime, "inference_precision": o.policy}
        if self.tf32 or self.allow_unverified:  # SAM 1's only: the others refuse them when set
            keywords |= {"tf32": self.tf32, "allow_unverified": self.allow_unverified}
        return keywords


def deploy_group(*, devices: tuple[str, ...] | None = None, device_help: str | None = None, tf32: bool = True,
                 allow_unverified: bool = True, runtime_default: str = AUTO, attention: bool = False) -> Callable:
    """The ``deploy`` group (:class:`Deploy`): ``--runtime`` (default ``runtime_default``), ``--inference-precision``,
    ``--threads``; ``--device`` among ``devices`` (with ``--tf32`` and ``--allow-unverified`` where asked), and the
    attention forms (``attention``)."""
    from vitdeploy.cli.options import (fused_attention_option, ort_device_options, runtime_option,
                                       runtime_threads_option)

    options: list[Callable] = []
    if devices is not None:
        if tf32:
            options.append(ort_device_options(devices, **({"help_text": device_help} if device_help else {}),
                                              allow_unverified=allow_unverified))
        else:
            import click

            options.append(click.option("--device", type=click.Choice(list(devices)), default="cpu", show_default=True,
                                        help=device_help or "ONNX Runtime execution provider for .onnx files."))
    if attention:
        options.append(fused_attention_option)
    options += [lambda fn: runtime_option(fn, default=runtime_default), runtime_threads_option]
    return option_group("deploy", Deploy, *options)


@dataclass(frozen=True)
class Job:
    """A dataset job's options (``--images`` None: not a job)."""

    images: str | None = None
    out_dir: str | None = None
    shard_size: int | None = None
    ray_address: str | None = None
    workers: int | None = None

    @property
    def asked(self) -> bool:
        """Whether any of the job's options was given."""
        return any(value is not None for value in dataclasses.astuple(self))


def job_group(required: bool = True) -> Callable:
    """The ``job`` group (:class:`Job`): the dataset-job options (``required``: --images and --out-dir)."""
    from vitdeploy.cli.dataset_jobs import dataset_job_options

    return option_group("job", Job, lambda fn: dataset_job_options(fn, required=required))


@dataclass(frozen=True)
class Timing:
    """Timed runs after untimed warm-up runs (``validate``, ``tune``: each verb its own defaults and help)."""

    runs: int = 1
    warmup: int = 0


@dataclass(frozen=True)
class Outputs:
    """What the verb writes besides its results: a JSON report, and whether existing outputs may be replaced."""

    report: str | None = None
    force: bool = False


def outputs_group(report: bool = True) -> Callable:
    """The ``outputs`` group (:class:`Outputs`): ``--report`` (where the verb writes one) and ``--force``."""
    from vitdeploy.cli.options import force_option, report_option

    return option_group("outputs", Outputs, *([report_option] if report else []), force_option)


__all__ = ["Deploy", "Job", "Outputs", "Timing", "deploy_group", "job_group", "option_group", "outputs_group"]
