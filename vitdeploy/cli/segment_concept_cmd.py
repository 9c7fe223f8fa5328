"""``vitdeploy segment-concept``: every instance of a concept (a text and/or exemplar boxes) in images, with SAM 3."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import click

from vitdeploy.cli.groups import Deploy, Job, Outputs, deploy_group, job_group, option_group, outputs_group
from vitdeploy.cli.options import echo_deployments, graph_records, handle_errors, parse_box, verbose_option


def _boxes(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> tuple:
    return tuple(parse_box(v) for v in values)


@dataclass(frozen=True)
class Concept:
    """The concept asked for: a text and/or exemplar boxes, or each image's from a prompts file; the score to keep."""

    text: str | None = None
    boxes: tuple = ()
    negative_boxes: tuple = ()
    prompts_file: str | None = None
    threshold: float = 0.5


def _sam3_graphs() -> tuple[str, ...]:
    from vitdeploy.runtime.apps.sam3.processor import GRAPHS

    return tuple(GRAPHS)


@click.command("segment-concept")
@click.option("--vision", "-V", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="SAM 3's exported vision encoder (vitdeploy export -r sam3).")
@click.option("--text-encoder", "-T", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="SAM 3's exported text encoder (-r sam3_text).")
@click.option("--detector", "-D", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="SAM 3's exported detector (-r sam3_detector).")
@click.option("--image", "-i", default=None, type=click.Path(exists=False, path_type=str),
              help="An image, or a folder of images (or --images and --out-dir for a dataset job).")
@option_group("concept", Concept,
              click.option("--text", "-t", default=None, help='The concept in words, e.g. "yellow school bus".'),
              click.option("--box", "-b", "boxes", multiple=True, callback=_boxes,
                           help="An exemplar box X0,Y0,X1,Y1 in pixels: an instance of the concept (repeatable)."),
              click.option("--negative-box", "negative_boxes", multiple=True, callback=_boxes,
                           help="A box X0,Y0,X1,Y1 of something that is not the concept (repeatable)."),
              click.option("--prompts", "prompts_file", type=click.Path(dir_okay=False, path_type=str), default=None,
                           help='With a folder or a dataset job: a JSON file of prompts per image, {"shelf.jpg": '
                                '{"text": "soda can", "boxes": [[x0, y0, x1, y1]], "negative_boxes": [[...]]}} (pixels; '
                                'an entry without "text" takes --text); images it does not name are left out.'),
              click.option("--threshold", type=click.FloatRange(0.0, 1.0), default=0.5, show_default=True,
                           help="Keep an instance when its score (query score x presence score) exceeds this."))
@click.option("--output", "-o", default=None, type=click.Path(path_type=str),
              help="OUT.json for one image (beside it OUT.masks.png, pixel value = instance number, and "
                   "OUT.overlay.png); a folder for a folder of images (<stem>.json and its PNGs).")
@click.option("--output-mode", type=click.Choice(["coco_rle", "uncompressed_rle"]), default="coco_rle",
              show_default=True, help="Segmentation encoding in the JSON: COCO's compressed RLE string, or uncompressed.")
@click.option("--record-inputs", "records", multiple=True, callback=graph_records(_sam3_graphs), metavar="GRAPH:FILE",
              help="Keep up to 16 of a graph's input sets from this run (vision_encoder, text_encoder, detector) in FILE "
                   "(.npz), to calibrate it on real inputs: 'vitdeploy calibrate GRAPH.onnx --feeds FILE'.")
@job_group(required=False)
@deploy_group()
@outputs_group(report=False)
@verbose_option
@handle_errors
def segment_concept(vision: str, text_encoder: str, detector: str, image: str, concept: Concept, output: str | None,
                    output_mode: str, records: dict[str, str], job: Job, deploy: Deploy, outputs: Outputs,
                    verbose: bool) -> None:
    """Segment every instance of a concept: a text prompt and/or exemplar boxes (SAM 3's Sam3Processor).

    \b
    Each image gets a JSON of instances (score, bbox XYWH and XYXY in pixels, area, segmentation as COCO RLE),
    a label PNG (0 background, k where instance k is; the higher score wins a shared pixel) and an overlay.
    Boxes are in pixels of each image (the official takes cx, cy, w, h in [0, 1]: converted here).

    \b
    Examples:
      vitdeploy segment-concept -V sam3.onnx -T sam3_text.onnx -D sam3_detector.onnx -i street.jpg \\
          --text "yellow school bus" -o buses.json
      vitdeploy segment-concept -V sam3.onnx -T sam3_text.onnx -D sam3_detector.onnx -i shelf.jpg \\
          --box 120,40,180,160 -o cans.json
      vitdeploy segment-concept -V sam3.onnx -T sam3_text.onnx -D sam3_detector.onnx -i photos/ --text dog -o dogs/
      vitdeploy segment-concept -V sam3.onnx -T sam3_text.onnx -D sam3_detector.onnx -i shelves/ \
          --prompts exemplars.json -o cans/

    \b
    With --images and --out-dir, a dataset job for a text prompt (or a prompt per image: --prompts): every image of
    a folder, glob or list, its instances as JSON lines (one per image) in shards with a manifest; resumable, bad
    images recorded and skipped, in this process or on Ray (--ray), as 'vitdeploy segment-all --images'.
    """
    from vitdeploy.cli.progress import format_seconds
    from vitdeploy.fileio import check_output_path, claim_outputs, require_model_file
    from vitdeploy.runtime.apps.sam3.concept import ConceptPrompt
    from vitdeploy.runtime.apps.sam3.processor import GRAPHS, Sam3ImageModel, Sam3Processor
    from vitdeploy.runtime.apps.verbs.segment_concept import (check_concept_jobs, plan_concept_jobs, prompts_per_image,
                                                              read_concept_prompts, run_concept_job)

    text, boxes, negative_boxes, prompts_file = concept.text, concept.boxes, concept.negative_boxes, concept.prompts_file
    threshold, force = concept.threshold, outputs.force
    if prompts_file is not None and (boxes or negative_boxes):
        raise click.UsageError("give the exemplar boxes either in --prompts or as --box/--negative-box, not both")
    if job.images is not None or job.out_dir is not None:
        if image is not None or output is not None:
            raise click.UsageError("give either --image and --output (an image or a folder) or --images and --out-dir "
                                   "(a dataset job)")
        _dataset_job({"vision": vision, "text": text_encoder, "detector": detector}, concept, output_mode, records,
                     job, deploy)
        return
    if image is None or output is None:
        raise click.UsageError("give --image and --output (an image or a folder), or --images and --out-dir (a dataset "
                               "job)")
    if job.shard_size is not None or job.ray_address is not None or job.workers is not None:
        raise click.UsageError("--shard-size, --ray and --workers are for a dataset job (--images and --out-dir)")
    if not Path(image).exists():
        raise click.BadParameter(f"'{image}' does not exist", param_hint="--image")
    if prompts_file is not None and not Path(image).is_dir():
        raise click.UsageError("--prompts is for a folder of images or a dataset job; for one image give --text/--box")
    jobs = plan_concept_jobs(image, output)
    if prompts_file is not None:
        chosen, left_out = prompts_per_image([str(job.image) for job in jobs], image,
                                             read_concept_prompts(prompts_file, text))
        jobs = [job for job in jobs if str(job.image) in chosen]
        prompts = [chosen[str(job.image)] for job in jobs]
        if left_out:
            click.echo(f"{len(left_out)} image(s) without an entry in {Path(prompts_file).name} left out")
    else:
        prompt = ConceptPrompt(text, tuple(boxes) + tuple(negative_boxes),
                               (True,) * len(boxes) + (False,) * len(negative_boxes))
        prompts = [prompt] * len(jobs)
    new_dirs = sorted({job.output.parent for job in jobs if not job.output.parent.exists()})
    for directory in new_dirs:
        check_output_path(directory)
    claim_outputs([p for job in jobs for p in job.outputs() if p.parent not in new_dirs] + list(records.values()),
                  force)
    for path in (vision, text_encoder, detector):
        require_model_file(path)
    check_concept_jobs(jobs, prompts)
    model = Sam3ImageModel(vision, text_encoder, detector, options=deploy.options())
    echo_deployments(model.vision, model.text, model.detector)
    recorders = {graph: model.record_inputs(graph) for graph in records}
    for text_prompt in sorted({p.text for p in prompts if p.text is not None}):
        model.encode_text(text_prompt)  # an empty or over-long text is refused before any image is encoded
    processor = Sam3Processor(model, confidence_threshold=threshold)
    for directory in new_dirs:
        directory.mkdir(parents=True, exist_ok=True)
    if prompts_file is not None:
        what = f"each image's prompt from {Path(prompts_file).name}"
    else:
        what = " and ".join(filter(None, [f'"{prompt.text}"' if prompt.text is not None else None,
                                          f"{len(prompt.boxes)} exemplar box(es)" if prompt.boxes else None]))
    click.echo(f"finding {what} in {len(jobs)} image(s) with {model.variant}")
    start = time.perf_counter()
    total = 0
    for job, prompt in zip(jobs, prompts):
        found = len(run_concept_job(processor, job, prompt, output_mode)["instances"])
        total += found
        click.echo(f"{job.image.name}: {found} instance(s) -> {job.output}")
    click.echo(f"{total} instance(s) in {len(jobs)} image(s) in {format_seconds(time.perf_counter() - start)}; "
               f"wrote {jobs[0].output}{' ...' if len(jobs) > 1 else ''} with its .masks.png and .overlay.png")
    for graph, recorder in recorders.items():
        runner = getattr(model, GRAPHS[graph])
        recorder.save(records[graph], {"graph": graph, "file": str(runner.path), "variant": model.variant})
        click.echo(f"recorded {len(recorder.samples)} of {recorder.calls} {graph} input set(s) to {records[graph]}")


def _dataset_job(files: dict[str, str], concept: Concept, output_mode: str, records: dict[str, str], job: Job,
                 deploy: Deploy) -> None:
    from vitdeploy.cli.dataset_jobs import run_dataset_job
    from vitdeploy.runtime.apps.datasets.job import job_config, list_images
    from vitdeploy.runtime.apps.verbs.segment_concept import check_text_prompts, prompts_per_image, read_concept_prompts

    if job.images is None or job.out_dir is None:
        raise click.UsageError("a dataset job needs both --images and --out-dir")
    if concept.boxes or concept.negative_boxes or records:
        raise click.UsageError("--box and --record-inputs are for --image: a dataset job takes a --text prompt, and "
                               "exemplar boxes per image in --prompts FILE")
    text = concept.text
    options: dict = {"text": text, "confidence_threshold": concept.threshold, "output_mode": output_mode}
    texts = [text]
    if concept.prompts_file is not None:
        root = job.images if Path(job.images).is_dir() else None
        chosen, left_out = prompts_per_image(list_images(job.images), root,
                                             read_concept_prompts(concept.prompts_file, text))
        options["prompts"] = {image_path: prompt.to_dict() for image_path, prompt in chosen.items()}
        texts = [prompt.text for prompt in chosen.values()]
        if left_out:
            click.echo(f"{len(left_out)} image(s) without an entry in {Path(concept.prompts_file).name} left out")
    elif text is None:
        raise click.UsageError("a dataset job needs a --text prompt (or --prompts FILE with a prompt per image)")
    config = job_config("concepts", files, deploy.options(in_process=False), options, pooled=job.ray_address is not None)
    check_text_prompts(config.plan["detector"].path, texts)
    run_dataset_job(config, job, "finding instances in")


COMMAND = segment_concept
