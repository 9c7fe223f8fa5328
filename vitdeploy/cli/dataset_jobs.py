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


def run_dataset_job(config, job, verb: str) -> None:
    """Plan, run (in this process or on Ray), print progress and a summary; on a stop, say how to resume.

    ``config`` (:func:`~vitdeploy.runtime.apps.datasets.job.job_config`, ``pooled`` on Ray) holds every file
    decided for the threads one worker runs: on Ray one unless ``--threads``, in this process the deployment's;
    ``job``: the job's options (:class:`vitdeploy.cli.groups.Job`)."""
    from vitdeploy.cli.progress import StageProgress, format_seconds
    from vitdeploy.cpu_features import available_cores
    from vitdeploy.runtime.apps.datasets.job import JobReport, plan_job, run_in_process, run_job

    images, out_dir, shard_size, ray_address, workers = job.images, job.out_dir, job.shard_size, job.ray_address, job.workers
    started_ray = False
    source = config.plan.files[0].deployment.source
    if ray_address is not None:
        from vitdeploy.runtime.apps.datasets.on_ray import cluster_cpus, run_on_ray, start_ray

        plan = plan_job(config, images, out_dir, shard_size=shard_size, deployment_source=source)
        started_ray = start_ray(ray_address, available_cores())
        threads = config.threads or 1
        workers = workers or max(1, cluster_cpus() // threads)
        where = f"on Ray ({'a local cluster' if ray_address == 'local' else ray_address}): {workers} worker(s) x {threads} thread(s)"
        results = run_on_ray(plan, workers)
    else:
        if workers is not None:
            raise click.UsageError("--workers is for --ray: in this process one model runs with --threads threads")
        plan = plan_job(config, images, out_dir, shard_size=shard_size, deployment_source=source)
        where = f"in this process ({config.threads or available_cores()} thread(s))"
        results = run_in_process(plan)
    for line in plan.store.redone:
        click.echo(f"warning: {line}", err=True)
    skipped = f", {plan.skipped} done before (skipped)" if plan.skipped else ""
    click.echo(f"{verb} {plan.pending} of {len(plan.images)} image(s){skipped} into {out_dir}: {len(plan.shards)} shard(s), "
               f"{Path(config.plan.files[0].path).name} as {plan.deployment}, {where}")
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


__all__ = ["dataset_job_options", "run_dataset_job"]
