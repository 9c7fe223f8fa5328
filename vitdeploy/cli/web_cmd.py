"""``vitdeploy web``: a static site that segments with no server (the page, onnxruntime-web and the model's files)."""

from __future__ import annotations

import click

from vitdeploy.cli.options import force_option, handle_errors, verbose_option


@click.command("web")
@click.option("--encoder", "-e", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="Exported image encoder: SAM's, SAM 2's, or SAM 3's vision encoder (one .onnx file).")
@click.option("--decoder", "-d", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="Its decoder: SAM's or SAM 2's mask decoder, or SAM 3's interactive decoder (one .onnx file).")
@click.option("--output", "-o", required=True, type=click.Path(file_okay=False, path_type=str),
              help="The site's folder (written whole, or not at all).")
@click.option("--check-image", type=click.Path(dir_okay=False, exists=True, path_type=str), default=None,
              help="The parity check's sample image (default: a bundled 256x256 PNG).")
@click.option("--max-image-pixels", type=click.IntRange(min=1), default=50_000_000, show_default=True,
              help="The most pixels an image opened in the page may have (width x height), as 'serve' takes.")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="Threads of native ONNX Runtime for the parity check's reference. [default: all cores]")
@click.option("--eager", is_flag=True,
              help="Also hold the official eager model's embedding of the sample image (PyTorch and the official "
                   "package; random-weight files are rebuilt from their seed): the page's check then measures "
                   "against it too.")
@click.option("--checkpoint", type=click.Path(dir_okay=False, exists=True, path_type=str), default=None,
              help="With --eager: the checkpoint the encoder was exported from (its SHA-256 is checked).")
@force_option
@verbose_option
@handle_errors
def web(encoder: str, decoder: str, output: str, check_image: str | None, max_image_pixels: int,
        threads: int | None, eager: bool, checkpoint: str | None, force: bool, verbose: bool) -> None:
    """Write a static site that segments with no server: open an image, click, see the mask.

    The folder holds the page, onnxruntime-web (WebAssembly, SIMD, and threads where the page is
    cross-origin isolated) and the two model files as given: the image is encoded and every click
    decoded in the browser. Any static file host serves it as it is; the COOP/COEP headers threads
    need come from _headers (Netlify, Cloudflare Pages) or from the site's service worker elsewhere.
    The site also carries native ONNX Runtime's answers on the same files for a sample image and a
    click: the page's "Check parity" measures the browser's embedding cosine and mask IoU against them.

    \b
    Examples:
      vitdeploy web -e sam_vit_b.onnx -d sam_vit_b_decoder.onnx -o site/
      vitdeploy web -e sam2.1_hiera_tiny.onnx -d sam2.1_hiera_tiny_decoder.onnx -o site/
      vitdeploy web -e sam3.onnx -d sam3_interactive.onnx -o site/            # SAM 3's clicks
      python -m http.server -d site 8000     # then open http://127.0.0.1:8000/
    """
    from vitdeploy.errors import InputError
    from vitdeploy.runtime.apps.serving.site import build_site

    if checkpoint and not eager:
        raise InputError("--checkpoint is for --eager: add --eager, or drop --checkpoint")
    site = build_site(encoder, decoder, output, force=force, check_image=check_image,
                      max_image_pixels=max_image_pixels, threads=threads,
                      eager=_official_encoder(encoder, checkpoint, threads) if eager else None)
    for item in site.files:
        if item.what:
            click.echo(f"  {item.path}  {item.bytes / 1e6:.2f} MB  ({item.what})")
    encode_ms, decode_ms = site.native_ms
    click.echo(f"wrote {site.folder}/ ({len(site.files)} files, {site.total_bytes / 1e6:.1f} MB); native ONNX Runtime "
               f"on the sample image: encode {encode_ms:.1f} ms, decode {decode_ms:.1f} ms")
    if site.eager_cosine is not None:
        click.echo(f"native ONNX Runtime vs the official eager model on the sample image: embedding cosine "
                   f"{site.eager_cosine:.7f}")
    for warning in site.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"serve it with any static file server, e.g.: python -m http.server -d {site.folder} 8000")


def _official_encoder(encoder: str, checkpoint: str | None, threads: int | None):
    """The official eager encoder the file was made from (the parity path's ``eager_reference``), on the encoder's
    input array: its outputs as arrays, in the file's output order."""
    import torch

    from vitdeploy.families import eager_reference
    from vitdeploy.metadata import read_onnx_metadata

    metadata = read_onnx_metadata(encoder)
    module = eager_reference(metadata, checkpoint).eval()
    if threads:
        torch.set_num_threads(threads)

    def run(inputs):
        with torch.inference_mode():
            out = module(torch.from_numpy(inputs))
        values = list(out.values()) if isinstance(out, dict) else [out] if isinstance(out, torch.Tensor) else list(out)
        return [value.float().numpy() for value in values]

    return run


COMMAND = web
