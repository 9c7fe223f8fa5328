"""``vitdeploy embed``: SAM image embeddings for a whole dataset, sharded, resumable, in one process or on Ray."""

from __future__ import annotations

import click

from vitdeploy.cli.dataset_jobs import run_dataset_job
from vitdeploy.cli.groups import Deploy, Job, deploy_group, job_group
from vitdeploy.cli.options import handle_errors, verbose_option


@click.command("embed")
@click.option("--encoder", "-e", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="Exported SAM image encoder (.onnx, or a TensorRT engine).")
@job_group()
@click.option("--format", "embedding_format", type=click.Choice(["npz", "parquet"]), default="npz", show_default=True,
              help="Shard files: NumPy .npz (arrays image, image_sha256, original_size, resized_size, embedding) or "
                   "Parquet (one row per image; the embedding a fixed-size float32 list; needs pyarrow).")
@deploy_group(devices=("cpu", "cuda", "tensorrt"), tf32=False,
              device_help="ONNX Runtime execution provider for .onnx files (with --ray: one GPU per worker off the CPU).")
@verbose_option
@handle_errors
def embed(encoder: str, job: Job, embedding_format: str, deploy: Deploy, verbose: bool) -> None:
    """Encode every image of a dataset once: embeddings for an annotation tool, or for prompting later.

    Writes shards of embeddings (with each image's path, SHA-256, original and resized size) and a
    manifest of what is done; a second run skips what the manifest names, so a stopped job resumes.
    An image that cannot be read is recorded in errors.jsonl and the job goes on. The embeddings are the
    ones 'vitdeploy predict --save-embedding' writes, so SamPredictor.set_image_embedding takes them.

    \b
    Examples:
      vitdeploy embed -e sam_vit_b.onnx --images photos/ --out-dir embeddings/
      vitdeploy embed -e sam_vit_b.onnx --images 'shots/**/*.jpg' --out-dir emb/ --format parquet
      vitdeploy embed -e sam_vit_b.onnx --images list.txt --out-dir emb/ --ray               # a local Ray cluster
      vitdeploy embed -e sam_vit_b.onnx --images list.parquet --out-dir /shared/emb --ray auto --workers 16
    """
    from vitdeploy.runtime.apps.datasets.job import job_config

    config = job_config("embed", {"encoder": encoder}, deploy.options(in_process=False),
                        {"embedding_format": embedding_format}, pooled=job.ray_address is not None)
    run_dataset_job(config, job, "embedding")


COMMAND = embed
