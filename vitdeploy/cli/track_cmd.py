"""``vitdeploy track``: follow objects through a video (or a folder of frames) with SAM 2's four exported graphs."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import click

from vitdeploy.cli.groups import Deploy, Outputs, deploy_group, option_group, outputs_group
from vitdeploy.cli.options import (echo_deployments, graph_records, handle_errors, parse_box, parse_click,
                                   sam_pair_options, verbose_option)
from vitdeploy.errors import InputError


def _frame_obj(text: str, rest_form: str) -> tuple[int, int, str]:
    parts = text.split(":", 2)
    if len(parts) != 3 or not parts[0].strip().isdigit() or not parts[1].strip().isdigit():
        raise click.BadParameter(f"'{text}' is not FRAME:OBJ:{rest_form} (FRAME the number in a frame's name, a video's "
                                 "frames counted from 0; OBJ an object id 1..255)")
    return int(parts[0]), int(parts[1]), parts[2]


def _parse_points(_ctx, _param, values: tuple[str, ...]) -> list[tuple[int, int, float, float, int]]:
    points = []
    for text in values:
        frame, obj, rest = _frame_obj(text, "X,Y[,LABEL]")
        points.append((frame, obj, *parse_click(rest, where=text)))
    return points


def _parse_boxes(_ctx, _param, values: tuple[str, ...]) -> list[tuple[int, int, tuple[float, ...]]]:
    boxes = []
    for text in values:
        frame, obj, rest = _frame_obj(text, "X0,Y0,X1,Y1")
        boxes.append((frame, obj, parse_box(rest, where=text)))
    return boxes


def _parse_masks(_ctx, _param, values: tuple[str, ...]) -> list[tuple[int, int, str]]:
    return [_frame_obj(text, "FILE") for text in values]


def _by_position(frames, prompts: list, start_frame: int | None, strict: bool, video: str) -> tuple[list, int | None]:
    """The prompts and ``--start-frame`` with each FRAME (the number in a frame's name, as the user sees it) turned
    into the frame's position, which the predictor indexes by; a gap in a folder's numbering said in one line, or
    refused with ``--strict``."""
    from dataclasses import replace

    missing = frames.missing_numbers()
    if missing:
        from vitdeploy.runtime.processing.video_frames import describe_numbers

        gap = f"'{Path(video).name}' skips frame(s) {describe_numbers(missing)} of {frames.numbers[0]}-{frames.numbers[-1]}"
        if strict:
            raise InputError(f"{gap}: add the missing frames, or leave out --strict to track the {len(frames)} there are")
        click.echo(f"note: {gap}: tracking the {len(frames)} there are; masks are named after their frames and FRAME "
                   "in the prompts is the number in a frame's name")
    moved = [replace(p, frame=frames.index_of(p.frame, f"object {p.obj_id} on frame {p.frame}")) for p in prompts]
    start = None if start_frame is None else frames.index_of(start_frame, f"--start-frame {start_frame}")
    return moved, start


@dataclass(frozen=True)
class Prompting:
    """The objects' prompts: clicks, boxes and masks, each on its frame."""

    points: list = field(default_factory=list)
    boxes: list = field(default_factory=list)
    masks: list = field(default_factory=list)


@dataclass(frozen=True)
class Span:
    """Which frames are tracked: the direction from the start frame, and how many."""

    direction: str = "both"
    start_frame: int | None = None
    max_frames: int | None = None


@dataclass(frozen=True)
class Animation:
    """The overlay animation: its file (or none) and frame rate."""

    overlay: str = "overlay.gif"
    no_overlay: bool = False
    fps: float | None = None


def _video_graphs() -> tuple[str, ...]:
    from vitdeploy.runtime.apps.sam2.video_predictor import GRAPHS

    return GRAPHS


@dataclass(frozen=True)
class Memory:
    """SAM 2's memory graphs beside the image encoder and decoder."""

    memory_encoder: str
    memory_attention: str


@dataclass(frozen=True)
class Frames:
    """The video or folder of frames, and whether a gap in a folder's numbering is refused."""

    video: str
    strict: bool


@dataclass(frozen=True)
class Written:
    """The folder the tracks go to, and the graphs' input sets recorded."""

    out_dir: str
    records: dict[str, str]


@click.command("track")
@sam_pair_options
@option_group("memory", Memory,
    click.option("--memory-encoder", "-m", required=True, type=click.Path(dir_okay=False, path_type=str),
                 help="Exported memory encoder (vitdeploy export -r sam2.1_hiera_tiny_memory_encoder, or "
                      "sam3_memory_encoder beside SAM 3's vision encoder and interactive decoder)."),
    click.option("--memory-attention", "-a", required=True, type=click.Path(dir_okay=False, path_type=str),
                 help="Exported memory attention (vitdeploy export -r sam2.1_hiera_tiny_memory_attention, or "
                      "sam3_memory_attention)."))
@option_group("frames", Frames,
    click.option("--video", "-i", required=True, type=click.Path(path_type=str),
                 help="A folder of frames named by index (00000.jpg, ...), or a video file (.mp4 and others: needs OpenCV)."),
    click.option("--strict", is_flag=True,
                 help="Refuse a folder of frames whose numbering has a gap (00004.jpg missing) instead of tracking the "
                      "frames there are."))
@option_group("prompting", Prompting, click.option(
    "--point", "-p", "points", multiple=True, callback=_parse_points, metavar="FRAME:OBJ:X,Y[,LABEL]",
    help="A click on object OBJ (1..255) in frame FRAME, pixels; LABEL 1 foreground (default) or 0. Repeatable: "
         "clicks of one object on one frame go in together."),
    click.option("--box", "-b", "boxes", multiple=True, callback=_parse_boxes, metavar="FRAME:OBJ:X0,Y0,X1,Y1",
                 help="A box around object OBJ in frame FRAME (one per object and frame; clicks may refine it)."),
    click.option("--mask", "masks", multiple=True, callback=_parse_masks, metavar="FRAME:OBJ:FILE",
                 help="A mask of object OBJ in frame FRAME: an image of the video's size, nonzero = object."))
@option_group("written", Written,
    click.option("--out-dir", "-o", required=True, type=click.Path(file_okay=False, path_type=str),
                 help="Folder to write: masks/NNNNN.png (pixel value = object id), masks.json (COCO RLE), the overlay."),
    click.option("--record-inputs", "records", multiple=True, callback=graph_records(_video_graphs), metavar="GRAPH:FILE",
                 help="Also save up to 16 of a graph's input sets, spread over the run (.npz), to calibrate it on real "
                      "inputs: 'vitdeploy calibrate GRAPH.onnx -p fp16 --feeds FILE'. GRAPH: memory_attention, "
                      "memory_encoder, decoder or image_encoder. Repeatable."))
@option_group("span", Span, click.option(
    "--direction", type=click.Choice(["both", "forward", "reverse"]), default="both", show_default=True,
    help="From the first prompted frame (or --start-frame): to the end, to frame 0, or both."),
    click.option("--start-frame", type=click.IntRange(min=0), default=None,
                 help="Frame (the number in its name) to track from [default: the first prompted]."),
    click.option("--max-frames", type=click.IntRange(min=0), default=None,
                 help="Frames to track after the start frame, per direction [default: to the video's end]."))
@option_group("animation", Animation, click.option(
    "--overlay", default="overlay.gif", show_default=True, type=click.Path(dir_okay=False, path_type=str),
    help="Overlay animation: a name inside --out-dir or a path; .gif, or .mp4 (OpenCV)."),
    click.option("--no-overlay", is_flag=True, help="Do not write the overlay animation."),
    click.option("--fps", type=click.FloatRange(min=0.1), default=None,
                 help="Overlay frame rate [default: the video file's, 10 for a folder of frames]."))
@click.option("--fill-hole-area", type=click.IntRange(min=0), default=None,
              help="Fill background holes of up to this many pixels (0: off; needs SciPy) [default: the official "
                   "predictor's: 8 for SAM 2, in each low-resolution mask; 0 for SAM 3, whose filling is at the "
                   "video's size].")
@deploy_group()
@outputs_group()
@verbose_option
@handle_errors
def track(encoder: str, decoder: str, memory: Memory, frames: Frames, prompting: Prompting, written: Written,
          span: Span, animation: Animation, fill_hole_area: int | None, deploy: Deploy, outputs: Outputs,
          verbose: bool) -> None:
    """Follow objects through a video with SAM 2 or SAM 3's tracker: clicks, boxes (or, SAM 2, masks) on chosen
    frames, masks on every frame.

    Reads every frame first (an unreadable one stops the run before any tracking), applies the
    prompts, tracks forward and backward from the first prompted frame, and writes the masks of every
    frame: a palette PNG per frame, COCO RLE in masks.json, and an overlay animation. The output
    folder appears only when complete. Needs no PyTorch.

    \b
    Examples:
      vitdeploy track -e sam2.onnx -d sam2_dec.onnx -m sam2_menc.onnx -a sam2_matt.onnx \\
          -i frames/ --point 0:1:210,350 --box 20:2:300,0,420,260 -o tracks/
      vitdeploy track ... -i clip.mp4 --point 0:1:210,350 --point 0:1:260,300,0 -o tracks/ --overlay tracks.mp4
      vitdeploy track ... -i frames/ --mask 12:1:first_mask.png --direction forward -o tracks/ --no-overlay
      vitdeploy track ... -i frames/ -p 0:1:210,350 -o tracks/ --record-inputs memory_attention:matt_inputs.npz
      vitdeploy track -e sam3.onnx -d sam3_interactive.onnx -m sam3_menc.onnx -a sam3_matt.onnx \\
          -i clip.mp4 --box 0:1:300,0,500,400 -o tracks/
    """
    memory_encoder, memory_attention = memory.memory_encoder, memory.memory_attention
    video, strict = frames.video, frames.strict
    out_dir, records = written.out_dir, written.records
    from vitdeploy.cli.progress import StageProgress, format_seconds
    from vitdeploy.fileio import atomic_write_bytes, claim_outputs
    from vitdeploy.runtime.apps.predictors import open_video_predictor
    from vitdeploy.runtime.apps.verbs.tracking import TrackWriter, check_out_dir, prompts_from_lists, track as track_frames

    report, force = outputs.report, outputs.force
    prompts = prompts_from_lists(prompting.points, prompting.boxes, prompting.masks)
    if not prompts:
        raise click.UsageError("give at least one --point, --box or --mask (FRAME:OBJ:...)")
    check_out_dir(out_dir, force)  # before reading the video
    claim_outputs([report, *records.values()], force)
    started = time.monotonic()
    predictor = open_video_predictor(encoder, decoder, memory_encoder, memory_attention, options=deploy.options(),
                                     fill_hole_area=fill_hole_area)
    echo_deployments(predictor.image_encoder, predictor.decoder, predictor.memory_encoder, predictor.memory_attention)
    recorders = {graph: predictor.record_inputs(graph) for graph in records}
    progress = StageProgress()
    state = predictor.init_state(video_path=video, progress=lambda done, total: progress("reading frames", done, total))
    frames = state["images"]
    asked = prompts  # as the user numbered the frames, for the report
    prompts, start_frame = _by_position(frames, prompts, span.start_frame, strict, str(video))
    click.echo(f"{Path(video).name}: {len(frames)} frames of {frames.width}x{frames.height}; {len(prompts)} prompt(s) "
               f"on {len({p.obj_id for p in prompts})} object(s) with {predictor.variant} ({predictor.image_encoder.name})")
    with TrackWriter(out_dir, frames, overlay=None if animation.no_overlay else animation.overlay,
                     fps=animation.fps or frames.fps or 10.0, force=force,
                     source=str(video), model=predictor.variant) as writer:
        tracked = 0
        for frame_idx, obj_ids, logits, scores in track_frames(predictor, state, prompts, direction=span.direction,
                                                               start_frame=start_frame, max_frames=span.max_frames,
                                                               progress=progress):
            writer.add(frame_idx, obj_ids, logits, scores)
            tracked += 1
        summary = writer.commit()
    for graph, recorder in recorders.items():
        runner = getattr(predictor, graph)
        recorder.save(records[graph], {"graph": graph, "file": str(runner.path), "variant": predictor.variant,
                                       "family": runner.metadata.get("family"), "video": str(video)})
        click.echo(f"recorded {len(recorder.samples)} of {recorder.calls} {graph} input set(s) to {records[graph]}")
    seconds = time.monotonic() - started
    per_frame = progress.times().get("tracking", 0.0) / max(tracked, 1)
    click.echo(f"tracked {len(summary['objects'])} object(s) over {tracked} frame(s) in {format_seconds(seconds)} "
               f"({per_frame * 1000:.0f} ms per frame); wrote {summary['out_dir']}/masks/ and masks.json"
               + (f", overlay {summary['overlay']}" if summary["overlay"] else ""))
    if report:
        data = {"video": video, "frames": len(frames), "tracked": tracked, "objects": summary["objects"],
                "prompts": [p.describe() for p in asked], "seconds": seconds, "ms_per_frame": per_frame * 1000,
                "runners": [predictor.image_encoder.name, predictor.decoder.name, predictor.memory_encoder.name,
                            predictor.memory_attention.name], "out_dir": summary["out_dir"], "overlay": summary["overlay"]}
        atomic_write_bytes(report, json.dumps(data, indent=2).encode())
        click.echo(f"report: {report}")


COMMAND = track
