"""``vitdeploy predict``: masks for an image and point/box prompts from an exported encoder + decoder."""

from __future__ import annotations

import json
from pathlib import Path

import click

from vitdeploy.cli.options import (force_option, handle_errors, ort_device_options, report_option, runtime_threads_option,
                                   sam_pair_options, verbose_option)


def _parse_point(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> list[tuple[float, float, int]]:
    points = []
    for text in values:
        parts = text.split(",")
        try:
            if len(parts) not in (2, 3):
                raise ValueError
            x, y = float(parts[0]), float(parts[1])
            label = int(parts[2]) if len(parts) == 3 else 1
        except ValueError:
            raise click.BadParameter(f"'{text}' is not X,Y or X,Y,LABEL (pixels; LABEL 1 foreground, 0 background)") from None
        if label not in (0, 1):
            raise click.BadParameter(f"'{text}': LABEL must be 1 (foreground) or 0 (background)")
        points.append((x, y, label))
    return points


def _parse_box(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> list[float] | None:
    if not values:
        return None
    if len(values) > 1:
        raise click.BadParameter(f"{len(values)} boxes given ({', '.join(values)}): SAM's decoder takes one box "
                                 "per prompt; give one --box (add --point clicks to refine it)")
    value = values[0]
    try:
        box = [float(v) for v in value.split(",")]
    except ValueError:
        box = []
    if len(box) != 4:
        raise click.BadParameter(f"'{value}' is not X0,Y0,X1,Y1 (pixels)")
    return box


@click.command("predict")
@sam_pair_options
@click.option("--image", "-i", required=True, type=click.Path(dir_okay=False, path_type=str), help="Input image (JPEG/PNG/WebP).")
@click.option("--point", "-p", "points", multiple=True, callback=_parse_point,
              help="Prompt point X,Y[,LABEL] in pixels; LABEL 1 foreground (default) or 0 background. Repeatable.")
@click.option("--box", "-b", multiple=True, callback=_parse_box, help="Prompt box X0,Y0,X1,Y1 in pixels (one).")
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="Mask PNG to write (white = object).")
@click.option("--overlay", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Overlay picture to write (default: next to --output, named <stem>.overlay.png).")
@click.option("--multimask", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True,
              help="Three candidate masks (the best-scoring one is written) or one; auto: three for a single point "
                   "without a box, as SAM advises for ambiguous clicks.")
@click.option("--save-embedding", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Also write the image's embedding here (.npz), to prompt the same image again with --embedding.")
@click.option("--embedding", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Use an embedding saved by --save-embedding for this image instead of running the encoder "
                   "(the decoder alone: a fraction of a second).")
@ort_device_options(("cpu", "cuda", "tensorrt"))
@click.option("--no-weight-check", is_flag=True,
              help="Accept an encoder and decoder exported from different checkpoints (e.g. a separately fine-tuned decoder).")
@runtime_threads_option
@report_option
@force_option
@verbose_option
@handle_errors
def predict(encoder: str, decoder: str, image: str, points: list[tuple[float, float, int]], box: list[float] | None,
            output: str, overlay: str | None, multimask: str, save_embedding: str | None, embedding: str | None, device: str, tf32: bool, allow_unverified: bool,
            no_weight_check: bool, threads: int,
            report: str | None, force: bool, verbose: bool) -> None:
    """Segment an object: run the exported encoder and decoder on an image with point/box prompts.

    Writes the mask as a PNG and the mask blended over the image (prompts drawn), and prints the
    predicted quality score of each candidate mask. Needs no PyTorch.

    \b
    Examples:
      vitdeploy predict -e sam_vit_b.onnx -d sam_vit_b_decoder.onnx -i dog.jpg --point 420,310 -o dog_mask.png
      vitdeploy predict -e enc.onnx -d dec.onnx -i street.png --box 40,60,380,420 --point 200,250,0 -o car.png
      vitdeploy predict -e enc.onnx -d dec.onnx -i dog.jpg -p 420,310 -o a.png --save-embedding dog.npz
      vitdeploy predict -e enc.onnx -d dec.onnx -i dog.jpg -p 100,80 -o b.png --embedding dog.npz   # no encoder run
    """
    import numpy as np

    from vitdeploy.errors import InputError
    from vitdeploy.fileio import atomic_write_bytes, claim_outputs
    from vitdeploy.runtime.images import read_image_rgb
    from vitdeploy.runtime.overlay import overlay_mask, save_png
    from vitdeploy.runtime.sam_predictor import SamPredictor, check_prompts_inside

    if not points and box is None:
        raise InputError("no prompt: give at least one --point X,Y[,LABEL] or a --box X0,Y0,X1,Y1")
    out_path = Path(output)
    if out_path.suffix.lower() != ".png":
        raise InputError(f"--output '{output}' must be a .png file (the mask is written as PNG)")
    overlay_path = Path(overlay) if overlay else out_path.with_name(out_path.stem + ".overlay.png")
    if overlay_path.resolve() == out_path.resolve():
        raise InputError("--overlay and --output are the same file: give two different paths")
    if save_embedding and embedding:
        raise InputError("--embedding reuses a saved embedding and --save-embedding writes one: give one of them")
    if save_embedding and Path(save_embedding).suffix.lower() != ".npz":
        raise InputError(f"--save-embedding '{save_embedding}' must be a .npz file")
    claim_outputs([out_path, overlay_path, report, save_embedding], force)
    notes: list[str] = []
    picture = read_image_rgb(image, notes)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    coords = np.array([[x, y] for x, y, _ in points], dtype=np.float64) if points else None
    labels = np.array([lab for _, _, lab in points], dtype=np.int64) if points else None
    check_prompts_inside(picture.shape[:2], coords, box)  # before seconds of encoding

    predictor = SamPredictor(encoder, decoder, device=device, threads=threads, check_weights=not no_weight_check,
                             tf32=tf32, allow_unverified=allow_unverified)
    if embedding:
        from vitdeploy.runtime.embeddings import load_embedding

        # (the same image file, by SHA-256, so the same size)
        features, size = load_embedding(embedding, image_path=image, encoder_metadata=predictor.encoder.metadata)
        predictor.set_image_embedding(features, size)
        click.echo(f"using the embedding in {embedding} (encoder not run)")
    else:
        click.echo(f"encoding {Path(image).name} ({picture.shape[1]}x{picture.shape[0]}) with {Path(encoder).name} "
                   f"({predictor.variant}, {predictor.encoder.name})")
        predictor.set_image(picture)
        if save_embedding:
            from vitdeploy.runtime.embeddings import save_embedding as write_embedding

            write_embedding(save_embedding, predictor.get_image_embedding(), predictor.original_size, image_path=image,
                            encoder_metadata=predictor.encoder.metadata, encoder_path=encoder)
            click.echo(f"wrote the image embedding to {save_embedding} (reuse it with --embedding)")
    use_multi = {"on": True, "off": False, "auto": len(points) == 1 and box is None}[multimask]
    masks, scores, _ = predictor.predict(coords, labels, np.array(box) if box else None, multimask_output=use_multi)
    best = int(np.argmax(scores))
    mask = masks[best]
    save_png(mask, out_path)
    save_png(overlay_mask(picture, mask, points=coords, labels=labels, box=np.array(box) if box else None), overlay_path)
    shown = ", ".join(f"{s:.3f}" for s in scores)
    click.echo(f"{len(scores)} mask(s), scores {shown}; wrote mask {best} ({mask.mean() * 100:.1f}% of the image) to "
               f"{out_path} and the overlay to {overlay_path}")
    if report:
        data = {"image": image, "encoder": encoder, "decoder": decoder, "points": points, "box": box,
                "multimask": use_multi, "scores": [float(s) for s in scores], "chosen": best,
                "mask_area_fraction": float(mask.mean()), "mask": str(out_path), "overlay": str(overlay_path),
                "runners": [predictor.encoder.name, predictor.decoder.name]}
        atomic_write_bytes(report, json.dumps(data, indent=2).encode())
        click.echo(f"report: {report}")


COMMAND = predict
