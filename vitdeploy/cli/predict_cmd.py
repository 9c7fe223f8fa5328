"""``vitdeploy predict``: masks for an image and point/box prompts from an exported encoder + decoder."""

from __future__ import annotations

import json
from pathlib import Path

import click

from dataclasses import dataclass

from vitdeploy.cli.groups import Deploy, Outputs, deploy_group, option_group, outputs_group
from vitdeploy.cli.options import echo_deployments, handle_errors, parse_box, parse_click, sam_pair_options, verbose_option


def _parse_point(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> list[tuple[float, float, int]]:
    return [parse_click(text) for text in values]


def _parse_box(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> list[float] | None:
    if not values:
        return None
    if len(values) > 1:
        raise click.BadParameter(f"{len(values)} boxes given ({', '.join(values)}): SAM's decoder takes one box "
                                 "per prompt; give one --box (add --point clicks to refine it)")
    return list(parse_box(values[0]))


@dataclass(frozen=True)
class Prompting:
    """The prompt of every image (``--point``, ``--box``) or of each (``--prompts``)."""

    points: list[tuple[float, float, int]]
    box: list[float] | None = None
    prompts: str | None = None


@dataclass(frozen=True)
class Written:
    """Where the masks go, and what else is written."""

    output: str | None = None
    overlay: str | None = None
    record_inputs: str | None = None


@dataclass(frozen=True)
class Embeddings:
    """An embedding saved to reuse, or reused instead of encoding."""

    save_embedding: str | None = None
    embedding: str | None = None


@click.command("predict")
@sam_pair_options
@click.option("--image", "-i", required=True, type=click.Path(path_type=str),
              help="Input image (JPEG/PNG/WebP/BMP), or a folder of them (not recursive): one mask per image.")
@option_group("prompting", Prompting, click.option(
    "--point", "-p", "points", multiple=True, callback=_parse_point,
    help="Prompt point X,Y[,LABEL] in pixels; LABEL 1 foreground (default) or 0 background. Repeatable."),
    click.option("--box", "-b", multiple=True, callback=_parse_box, help="Prompt box X0,Y0,X1,Y1 in pixels (one)."),
    click.option("--prompts", type=click.Path(dir_okay=False, path_type=str), default=None,
                 help='With a folder: a JSON file of prompts per image, {"photo.jpg": {"points": [[x, y], [x, y, 0]], '
                      '"box": [x0, y0, x1, y1]}}; images it does not name are left out.'))
@option_group("written", Written, click.option(
    "--output", "-o", type=click.Path(path_type=str), default=None,
    help="Mask PNG to write (white = object); with a folder of images, the folder for <stem>.png and "
         "<stem>.overlay.png. Not needed to only --save-embedding."),
    click.option("--overlay", type=click.Path(dir_okay=False, path_type=str), default=None,
                 help="Overlay picture to write (default: next to --output, named <stem>.overlay.png)."),
    click.option("--record-inputs", "record_inputs", type=click.Path(dir_okay=False, path_type=str), default=None,
                 metavar="FILE", help="Also save up to 16 of the decoder's input sets, spread over the run (.npz), to "
                                      "calibrate it on real inputs: 'vitdeploy calibrate DECODER.onnx -p fp16 --feeds "
                                      "FILE'."))
@click.option("--multimask", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True,
              help="Three candidate masks (the best-scoring one is written) or one; auto: three for a single point "
                   "without a box, as SAM advises for ambiguous clicks.")
@option_group("embeddings", Embeddings, click.option(
    "--save-embedding", type=click.Path(path_type=str), default=None,
    help="Also write the image's embedding here (.npz; with a folder of images, a folder of <stem>.npz), "
         "to prompt the same image again with --embedding. Without a prompt: encode only."),
    click.option("--embedding", type=click.Path(path_type=str), default=None,
                 help="Use an embedding saved by --save-embedding for this image (with a folder: the folder of "
                      "<stem>.npz) instead of running the encoder (the decoder alone: a fraction of a second)."))
@click.option("--no-weight-check", is_flag=True,
              help="Accept an encoder and decoder exported from different checkpoints (e.g. a separately fine-tuned decoder).")
@deploy_group(devices=("cpu", "cuda", "tensorrt"))
@outputs_group()
@verbose_option
@handle_errors
def predict(encoder: str, decoder: str, image: str, prompting: Prompting, written: Written, multimask: str,
            embeddings: Embeddings, no_weight_check: bool, deploy: Deploy, outputs: Outputs, verbose: bool) -> None:
    """Segment an object: run the exported encoder and decoder on an image with point/box prompts.

    Writes the mask as a PNG and the mask blended over the image (prompts drawn), and prints the
    predicted quality score of each candidate mask. A folder of images runs with the same sessions
    (loaded once), each image with the same prompt or its own from --prompts; everything is checked
    (images decode, prompts fit, outputs free) before the first image is encoded. Needs no PyTorch.

    \b
    Examples:
      vitdeploy predict -e sam_vit_b.onnx -d sam_vit_b_decoder.onnx -i dog.jpg --point 420,310 -o dog_mask.png
      vitdeploy predict -e enc.onnx -d dec.onnx -i street.png --box 40,60,380,420 --point 200,250,0 -o car.png
      vitdeploy predict -e enc.onnx -d dec.onnx -i dog.jpg -p 420,310 -o a.png --save-embedding dog.npz
      vitdeploy predict -e enc.onnx -d dec.onnx -i dog.jpg -p 100,80 -o b.png --embedding dog.npz   # no encoder run
      vitdeploy predict -e enc.onnx -d dec.onnx -i frames/ --box 40,60,380,420 -o masks/
      vitdeploy predict -e enc.onnx -d dec.onnx -i photos/ --prompts clicks.json -o masks/ --report masks.json
      vitdeploy predict -e enc.onnx -d dec.onnx -i photos/ --save-embedding embeddings/   # encode only
      vitdeploy predict -e enc.onnx -d dec.onnx -i photos/ --prompts clicks.json -o masks/ --record-inputs dec_inputs.npz
    """
    from vitdeploy.errors import InputError
    from vitdeploy.fileio import atomic_write_bytes
    from vitdeploy.runtime.apps.verbs.predict_images import (Prompt, check_jobs, claim_job_outputs, plan_folder, plan_single,
                                                       read_prompts_file)

    points, box, prompts = prompting.points, prompting.box, prompting.prompts
    output, overlay, record_inputs = written.output, written.overlay, written.record_inputs
    save_embedding, embedding = embeddings.save_embedding, embeddings.embedding
    report, force = outputs.report, outputs.force
    prompt = Prompt(tuple(points), tuple(box) if box else None)
    folder = Path(image).is_dir()
    if save_embedding and embedding:
        raise InputError("--embedding reuses a saved embedding and --save-embedding writes one: give one of them")
    if prompts and not folder:
        raise InputError("--prompts is for a folder of images (-i FOLDER); for one image give --point/--box")
    if prompts and prompt:
        raise InputError("give the prompts either in --prompts or as --point/--box, not both")
    prompted = bool(prompt or prompts)
    if not prompted and (output or not save_embedding):  # without a prompt, only --save-embedding has work to do
        raise InputError("no prompt: give at least one --point X,Y[,LABEL] or a --box X0,Y0,X1,Y1"
                         + (" (or --prompts FILE)" if folder else "") + ("" if output else ", or only --save-embedding to encode"))
    if record_inputs and not prompted:
        raise InputError("--record-inputs keeps the decoder's inputs: give a prompt (--point/--box or --prompts)")
    if prompted and not output:
        raise InputError("give --output (-o): " + ("a folder for the masks" if folder else "the mask PNG to write"))
    if folder:
        if overlay:
            raise InputError("--overlay names one file: with a folder of images the overlays go to --output as <stem>.overlay.png")
        if output and Path(output).suffix.lower() == ".png":
            raise InputError(f"--output '{output}' looks like a file: with a folder of images give a folder for the masks")
        jobs, skipped = plan_folder(image, prompt, output, prompts=read_prompts_file(prompts) if prompts else None,
                                    save_embedding_dir=save_embedding, embedding_dir=embedding)
    else:
        jobs, skipped = [plan_single(image, prompt, output, overlay, save_embedding, embedding)], []
    new_dirs = claim_job_outputs(jobs, force, [report, record_inputs], new_folders=folder)
    notes: list[str] = []
    check_jobs(jobs, notes)  # before seconds of encoding per image
    for note in notes:
        click.echo(f"note: {note}", err=True)
    if skipped:
        click.echo(f"{len(skipped)} image(s) without an entry in {Path(prompts).name} left out: {', '.join(skipped[:5])}"
                   + (" ..." if len(skipped) > 5 else ""))
    for directory in new_dirs:
        directory.mkdir(exist_ok=True)

    results, runners = _run(jobs, encoder, decoder, multimask, folder, record_inputs, check_weights=not no_weight_check,
                            **deploy.predictor_keywords())
    if folder:
        masks = sum(r.mask is not None for r in results)
        saved = sum(r.embedding is not None for r in results)
        click.echo(f"{len(results)} image(s): {masks} mask(s)" + (f" in {output}" if masks else "")
                   + (f", {saved} embedding(s) in {save_embedding}" if saved else ""))
    if report:
        records = [{**r.to_dict(), "prompt": job.prompt.to_dict()} for job, r in zip(jobs, results)]
        data = {"encoder": encoder, "decoder": decoder, "multimask": multimask, "runners": runners}
        # one image: its record at the top level; a folder: one record per image
        data.update({"images": records, "left_out": skipped} if folder else records[0])
        atomic_write_bytes(report, json.dumps(data, indent=2).encode())
        click.echo(f"report: {report}")


def _run(jobs, encoder: str, decoder: str, multimask: str, folder: bool, record_inputs: str | None,
         **predictor_options):
    """(results, runner names): the jobs run with one predictor, each result printed as it comes; with
    ``record_inputs``, the decoder's input sets written there."""
    from vitdeploy.cli.progress import StageProgress
    from vitdeploy.runtime.apps.verbs.predict_images import predict_images
    from vitdeploy.runtime.apps.predictors import open_sam_predictor

    predictor = open_sam_predictor(encoder, decoder, **predictor_options)
    echo_deployments(predictor.encoder, predictor.decoder)
    graph = predictor.RECORDABLE[0]  # the decoder, by its name in this model
    recorder = predictor.record_inputs(graph) if record_inputs else None
    described = f"{Path(encoder).name} ({predictor.variant}, {predictor.encoder.name})"
    if folder:
        click.echo(f"{len(jobs)} image(s) with {described}")

    def on_encode(job, size: tuple[int, int]) -> None:
        if not folder:
            click.echo(f"encoding {job.image.name} ({size[0]}x{size[1]}) with {described}")

    def on_result(r) -> None:
        head = f"{Path(r.image).name}: " if folder else ""
        if not r.encoded:
            click.echo(f"{head}using the embedding in {jobs[0].embedding if not folder else 'its .npz'} (encoder not run)")
        if r.embedding and not folder:
            click.echo(f"wrote the image embedding to {r.embedding} (reuse it with --embedding)")
        if r.mask is not None:
            shown = ", ".join(f"{s:.3f}" for s in r.scores)
            click.echo(f"{head}{len(r.scores)} mask(s), scores {shown}; wrote mask {r.chosen} "
                       f"({r.mask_area_fraction * 100:.1f}% of the image) to {r.mask} and the overlay to {r.overlay}")

    results = predict_images(predictor, jobs, multimask, progress=StageProgress() if folder else None,
                             on_encode=on_encode, on_result=on_result)
    if recorder is not None:
        recorder.save(record_inputs, {"graph": graph, "file": str(predictor.decoder.path), "variant": predictor.variant,
                                      "family": predictor.decoder.metadata.get("family")})
        click.echo(f"recorded {len(recorder.samples)} of {recorder.calls} {graph} input set(s) to {record_inputs}")
    return results, [predictor.encoder.name, predictor.decoder.name]


COMMAND = predict
