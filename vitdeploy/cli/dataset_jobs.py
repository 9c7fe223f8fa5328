"""The options and the driver loop the dataset-job verbs share (``embed``; ``segment-all --images``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from vitdeploy.cli.options import Interrupted


def dataset_job_options(fn: Callable, required: bool = True) -> Callable:
    """--images, --out-dir, --shard-size, --ray [ADDRESS], --workers (``required``: --images and --out-dir)."""
    options = [
        click.option("--images", "images", required=required, default=None, type=str,
                     help="The images: a folder (searched recursively), a glob in quotes ('photos/**/*.jpg'), a .txt list "
                          "(one path per line, relative to the list) or a .parquet table with a 'path' column."),
        click.option("--out-dir", "out_dir", required=required, default=None, type=click.Path(file_okay=False, path_type=str),
                     help="Folder for the shards, manifest.jsonl and errors.jsonl. Run the same command again to resume: "
                          "images the manifest names are skipped."),
        click.option("--shard-size", type=click.IntRange(min=1), default=None,
                     help="Images per shard file (the unit of work, of resuming and of a Ray task). "
                          "[default: 16 embeddings (64 MiB for ViT-B), 64 images of masks]"),
        click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
                     help="Run on Ray Data: --ray alone starts a local cluster on this machine; --ray ADDRESS joins one "
                          "('auto', 'ray://head:10001'). Needs 'vitdeploy[ray]'. [default: in this process]"),
        click.option("--workers", type=click.IntRange(min=1), default=None,
                     help="With --ray: actors, each holding one loaded model with --threads threads. "
                          "[default: the cluster's CPUs / --threads]"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def resolve_deployment(model: str, runtime: str, inference_precision: str | None, threads: int | None, device: str,
                       on_ray: bool = False, check_model: Callable[[str], None] | None = None):
    """The deployment every worker runs (never ``auto``: the driver decides once, so all workers compute alike).

    On Ray each worker runs ``threads`` threads (default 1), so ``auto`` decides for that many, not for the
    driver's cores: the same decision (and the same numbers) as the job in one process with ``--threads`` 1.
    ``check_model(path)`` refuses an ``.onnx`` file of another model from its metadata first, before a first-use probe
    would run on it (default: a SAM encoder, what the dataset jobs take)."""
    from vitdeploy.runtime.deploy.auto import resolve
    from vitdeploy.runtime.deploy.deployment import AUTO, Deployment

    if str(model).lower().endswith(".onnx") and Path(model).is_file():
        (check_model or _check_sam_encoder_file)(model)
    if on_ray:
        threads = threads or 1
    if runtime == AUTO:
        return resolve(model, precision=inference_precision, threads=threads, device=device)
    return Deployment(runtime, inference_precision or "file", threads, source="asked")


def _check_sam_encoder_file(path: str) -> None:
    from vitdeploy.metadata import read_onnx_metadata
    from vitdeploy.runtime.apps.sam.predictor import check_sam_encoder

    check_sam_encoder(read_onnx_metadata(path), f"'{path}'")


def run_dataset_job(config, images: str, out_dir: str, shard_size: int | None, ray_address: str | None,
                    workers: int | None, chosen, verb: str) -> None:
    """Plan, run (in this process or on Ray), print progress and a summary; on a stop, say how to resume.

    ``config.threads`` is what the user asked (None: in this process the deployment's threads, else every core;
    on Ray one per worker). ``chosen`` is the resolved deployment (its ``source`` is printed)."""
    from dataclasses import replace

    from vitdeploy.cli.progress import StageProgress, format_seconds
    from vitdeploy.cpu_features import available_cores
    from vitdeploy.runtime.apps.datasets.job import JobReport, plan_job, run_in_process, run_job

    started_ray = False
    if ray_address is not None:
        from vitdeploy.runtime.apps.datasets.on_ray import cluster_cpus, run_on_ray, start_ray

        config = replace(config, threads=config.threads or 1)
        plan = plan_job(config, images, out_dir, shard_size=shard_size, deployment_source=chosen.source)
        started_ray = start_ray(ray_address, available_cores())
        workers = workers or max(1, cluster_cpus() // config.threads)
        where = f"on Ray ({'a local cluster' if ray_address == 'local' else ray_address}): {workers} worker(s) x {config.threads} thread(s)"
        results = run_on_ray(plan, workers)
    else:
        if workers is not None:
            raise click.UsageError("--workers is for --ray: in this process one model runs with --threads threads")
        config = replace(config, threads=config.threads or chosen.threads or available_cores())
        plan = plan_job(config, images, out_dir, shard_size=shard_size, deployment_source=chosen.source)
        where = f"in this process ({config.threads} thread(s))"
        results = run_in_process(plan)
    for line in plan.store.redone:
        click.echo(f"warning: {line}", err=True)
    skipped = f", {plan.skipped} done before (skipped)" if plan.skipped else ""
    click.echo(f"{verb} {plan.pending} of {len(plan.images)} image(s){skipped} into {out_dir}: {len(plan.shards)} shard(s), "
               f"{Path(config.encoder).name} as {plan.deployment}, {where}")
    report = JobReport(total=len(plan.images), skipped=plan.skipped)
    try:
        run_job(plan, results, StageProgress(), report)
    except Interrupted:
        click.echo(f"{report.done + report.failed} image(s) of {plan.pending} finished in {report.shards} shard(s) before the stop "
                   f"are in {plan.store.manifest_path}: run the same command again to resume", err=True)
        raise
    finally:
        if started_ray:
            from vitdeploy.runtime.apps.datasets.on_ray import stop_ray

            stop_ray()
    rate = f" ({report.images_per_second:.2f} images/s)" if report.done + report.failed else ""
    click.echo(f"{report.done} image(s) done in {format_seconds(report.seconds)}{rate}; manifest {plan.store.manifest_path}")
    failed = plan.store.failed()
    if failed:
        click.echo(f"warning: {len(failed)} image(s) failed and were left out (reasons in "
                   f"{plan.store.folder / 'errors.jsonl'}); the next run retries them", err=True)


__all__ = ["dataset_job_options", "resolve_deployment", "run_dataset_job"]
