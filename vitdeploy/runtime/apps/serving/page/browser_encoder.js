// SAM's image encoder in the browser, with onnxruntime-web (WebAssembly): the arithmetic of vitdeploy's
// SamPreprocessor (vitdeploy/runtime/processing/preprocess.py) and the C++ library's (cpp/src/preprocess.cpp):
// the longest side resized to the encoder's size by Pillow's bilinear resample (its fixed-point weights, its rounding
// and Pillow 13's pass order, so the resized pixels are Pillow's to the bit), normalized in float32, zero-padded
// bottom/right to a square, encoded. Used by the static site ('vitdeploy web'), where nothing runs on a server.
"use strict";

const browserEncoder = (() => {
  const PRECISION_BITS = 32 - 8 - 2;  // Pillow, Resample.c: 8 bits for the result, 2 for overflow, the rest fraction
  let facts = null, session = null;

  function resizedShape(height, width, longSide) {  // preprocess_shape: each side at least 1 pixel
    const scale = longSide / Math.max(height, width);
    return [Math.max(1, Math.floor(height * scale + 0.5)), Math.max(1, Math.floor(width * scale + 0.5))];
  }

  function coefficients(inSize, outSize) {
    // precompute_coeffs + normalize_coeffs_8bpc for the bilinear filter (support 1), in the same order and types
    const scale = inSize / outSize, filterscale = scale < 1 ? 1 : scale, support = filterscale;
    const ksize = Math.ceil(support) * 2 + 1, invFilterscale = 1 / filterscale;
    const bounds = new Int32Array(outSize * 2), weights = new Int32Array(outSize * ksize), k = new Float64Array(ksize);
    for (let xx = 0; xx < outSize; xx++) {
      const center = (xx + 0.5) * scale;
      const xmin = Math.max(Math.trunc(center - support + 0.5), 0);
      const xmax = Math.min(Math.trunc(center + support + 0.5), inSize) - xmin;
      let ww = 0;
      for (let x = 0; x < xmax; x++) {
        const t = Math.abs((x + xmin - center + 0.5) * invFilterscale);
        k[x] = t < 1 ? 1 - t : 0;
        ww += k[x];
      }
      for (let x = 0; x < xmax; x++) {
        const w = ww !== 0 ? k[x] / ww : k[x];
        weights[xx * ksize + x] = Math.trunc(w < 0 ? -0.5 + w * (1 << PRECISION_BITS) : 0.5 + w * (1 << PRECISION_BITS));
      }
      bounds[2 * xx] = xmin;
      bounds[2 * xx + 1] = xmax;
    }
    return {ksize, bounds, weights};
  }

  function pass(pixels, width, height, outSize, horizontal) {
    // one resample pass of an RGB image (Uint8Array, 3 bytes a pixel) along x (horizontal) or y
    const c = coefficients(horizontal ? width : height, outSize);
    const outW = horizontal ? outSize : width, outH = horizontal ? height : outSize;
    const out = new Uint8Array(outW * outH * 3), half = 1 << (PRECISION_BITS - 1);
    const step = horizontal ? 3 : width * 3;  // bytes between two taps
    for (let y = 0; y < outH; y++) {
      for (let x = 0; x < outW; x++) {
        const o = horizontal ? x : y, first = c.bounds[2 * o], taps = c.bounds[2 * o + 1], kw = o * c.ksize;
        let p = horizontal ? (y * width + first) * 3 : (first * width + x) * 3;
        let s0 = half, s1 = half, s2 = half;
        for (let t = 0; t < taps; t++, p += step) {
          const w = c.weights[kw + t];
          s0 += pixels[p] * w;
          s1 += pixels[p + 1] * w;
          s2 += pixels[p + 2] * w;
        }
        const d = (y * outW + x) * 3;
        out[d] = Math.min(Math.max(s0 >> PRECISION_BITS, 0), 255);
        out[d + 1] = Math.min(Math.max(s1 >> PRECISION_BITS, 0), 255);
        out[d + 2] = Math.min(Math.max(s2 >> PRECISION_BITS, 0), 255);
      }
    }
    return out;
  }

  function resizePillow(rgb, width, height, outW, outH) {
    // Image.resize((outW, outH), Image.BILINEAR) of Pillow 13: the vertical pass first when the height shrinks by
    // more than twice what the width does; the two orders round the intermediate image differently
    const shrinkH = height - outH, shrinkW = width - outW;
    const verticalFirst = shrinkH > 0 && shrinkH > shrinkW * 2;
    let pixels = rgb;
    if (verticalFirst) {
      if (outH !== height) pixels = pass(pixels, width, height, outH, false);
      if (outW !== width) pixels = pass(pixels, width, outH, outW, true);
    } else {
      if (outW !== width) pixels = pass(pixels, width, height, outW, true);
      if (outH !== height) pixels = pass(pixels, outW, height, outH, false);
    }
    return pixels;
  }

  async function pixelsOf(blob) {
    // the image file's RGB bytes, upright (EXIF orientation applied, as read_image_rgb does), no colour conversion
    const bitmap = await createImageBitmap(blob, {colorSpaceConversion: "none", premultiplyAlpha: "none"});
    const canvas = new OffscreenCanvas(bitmap.width, bitmap.height);
    const context = canvas.getContext("2d", {willReadFrequently: true});
    context.drawImage(bitmap, 0, 0);
    const rgba = context.getImageData(0, 0, bitmap.width, bitmap.height).data;
    const rgb = new Uint8Array(bitmap.width * bitmap.height * 3);
    for (let i = 0, j = 0; i < rgba.length; i += 4, j += 3) {
      rgb[j] = rgba[i];
      rgb[j + 1] = rgba[i + 1];
      rgb[j + 2] = rgba[i + 2];
    }
    return {rgb, width: bitmap.width, height: bitmap.height};
  }

  function inputTensor(rgb, width, height) {
    // SamPreprocessor: resize, (x - mean) / std in float32, zero-padded bottom/right to (1, 3, S, S)
    const size = facts.input_size, [h, w] = resizedShape(height, width, size);
    const resized = resizePillow(rgb, width, height, w, h);
    const data = new Float32Array(3 * size * size), f = Math.fround;
    const mean = facts.pixel_mean.map(f), std = facts.pixel_std.map(f);
    for (let y = 0; y < h; y++) {
      for (let x = 0; x < w; x++) {
        for (let c = 0; c < 3; c++) {
          data[c * size * size + y * size + x] = f(f(resized[(y * w + x) * 3 + c] - mean[c]) / std[c]);
        }
      }
    }
    return new ort.Tensor("float32", data, [1, 3, size, size]);
  }

  async function load(encoderFacts) {
    facts = encoderFacts;
    const bytes = await (await fetch(facts.url)).arrayBuffer();
    session = await ort.InferenceSession.create(bytes, {executionProviders: browserRuntime.encoderProviders()});
    return bytes.byteLength;
  }

  async function encode(image) {
    // {rgb, width, height} -> the image embedding (an ort.Tensor)
    const out = await session.run({[facts.input_name]: inputTensor(image.rgb, image.width, image.height)});
    return out[facts.output_name];
  }

  return {load, encode, pixelsOf, resizePillow, ready: () => session !== null};
})();
