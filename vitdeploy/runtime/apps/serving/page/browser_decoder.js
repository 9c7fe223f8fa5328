// SAM's prompt encoder and mask decoder in the browser, with onnxruntime-web (WebAssembly, one thread), on the
// embedding the server computed: clicks need no round trip. The same arithmetic as vitdeploy's SamPredictor
// (vitdeploy/runtime/apps/sam/predictor.py, runtime/processing/): prompts scaled to the encoder's frame, a padding
// point (0, 0, label -1) without a box or the box's corners labelled 2 and 3, and the low-resolution logits
// upscaled by PyTorch's bilinear resize (align_corners=False) to the encoder's size, cropped to the resized image,
// resized to the original, thresholded at 0 (both resizes composed into a few taps per output pixel).
"use strict";

const browserDecoder = (() => {
  let facts = null, session = null, embedding = null, size = null, upscale = null;

  async function load(serverFacts) {
    // onnxruntime-web, then the decoder file from the server (or the static site's folder)
    facts = serverFacts;
    if (typeof ort === "undefined") await browserRuntime.load(1);
    const bytes = await (await fetch(facts.url)).arrayBuffer();
    session = await ort.InferenceSession.create(bytes, {executionProviders: browserRuntime.decoderProviders()});
    return bytes.byteLength;
  }

  async function setImage(id, imageSize) {
    const response = await fetch(`v1/embeddings/${id}/embedding`);
    if (!response.ok) throw new Error(`${response.status}: ${(await response.json()).error}`);
    const shape = response.headers.get("X-Embedding-Shape").split(",").map(Number);
    embedding = new ort.Tensor("float32", new Float32Array(await response.arrayBuffer()), shape);
    size = imageSize;
    upscale = null;  // made on the first decode (it needs the decoder's low-resolution size)
    return shape;
  }

  function useEmbedding(tensor, imageSize) {
    // an embedding computed in this page (the static site's encoder) for an image of imageSize [height, width]
    embedding = tensor;
    size = imageSize;
    upscale = null;
  }

  function resizedShape(height, width, longSide) {  // ResizeLongestSide.get_preprocess_shape
    const scale = longSide / Math.max(height, width);
    return [Math.max(1, Math.floor(height * scale + 0.5)), Math.max(1, Math.floor(width * scale + 0.5))];
  }

  function bilinear(inSize, outSize) {
    // PyTorch's bilinear taps along one axis in float32 (area_pixel_compute_source_index): [[index, weight], ...] rows
    const f = Math.fround, scale = f(inSize / outSize), rows = [];
    for (let i = 0; i < outSize; i++) {
      const src = Math.max(f(f(scale * f(i + 0.5)) - 0.5), 0);
      const lo = Math.min(Math.floor(src), inSize - 1), hi = Math.min(lo + 1, inSize - 1);
      const frac = Math.min(Math.max(f(src - lo), 0), 1);
      rows.push([[lo, 1 - frac], [hi, frac]]);
    }
    return rows;
  }

  function composeAxis(lowSize, inputSize, resized, original) {
    // (original x low) taps of: resize low -> inputSize, keep the first `resized`, resize resized -> original
    const first = bilinear(lowSize, inputSize), second = bilinear(resized, original);
    return second.map((taps) => {
      const weights = new Map();
      for (const [j, a] of taps) {
        for (const [k, b] of first[j]) weights.set(k, (weights.get(k) || 0) + a * b);
      }
      const sorted = [...weights.entries()].filter(([, w]) => w !== 0).sort((x, y) => x[0] - y[0]);
      return {index: sorted.map(([k]) => k), weight: sorted.map(([, w]) => Math.fround(w))};
    });
  }

  function makeUpscaler(lowH, lowW) {
    const [height, width] = size, [resizedH, resizedW] = resizedShape(height, width, facts.input_size);
    const rows = composeAxis(lowH, facts.input_size, resizedH, height);
    const cols = composeAxis(lowW, facts.input_size, resizedW, width);
    return (low, offset) => {
      // low: Float32Array holding (lowH, lowW) at offset -> Uint8Array (height x width), logits > 0
      const wide = new Float32Array(lowH * width);  // columns first, on the small array
      for (let r = 0; r < lowH; r++) {
        for (let x = 0; x < width; x++) {
          const {index, weight} = cols[x];
          let sum = Math.fround(weight[0] * low[offset + r * lowW + index[0]]);
          for (let t = 1; t < index.length; t++) sum = Math.fround(sum + Math.fround(weight[t] * low[offset + r * lowW + index[t]]));
          wide[r * width + x] = sum;
        }
      }
      const mask = new Uint8Array(height * width);
      for (let y = 0; y < height; y++) {
        const {index, weight} = rows[y];
        for (let x = 0; x < width; x++) {
          let sum = Math.fround(weight[0] * wide[index[0] * width + x]);
          for (let t = 1; t < index.length; t++) sum = Math.fround(sum + Math.fround(weight[t] * wide[index[t] * width + x]));
          mask[y * width + x] = sum > 0 ? 1 : 0;
        }
      }
      return mask;
    };
  }

  async function decode(prompt) {
    // {points, labels, box, multimask_output} in pixels of the original image -> {masks, scores, areas}
    const [height, width] = size, [resizedH, resizedW] = resizedShape(height, width, facts.input_size);
    const sx = resizedW / width, sy = resizedH / height;
    const coords = [], labels = [];
    (prompt.points || []).forEach(([x, y], k) => { coords.push(x * sx, y * sy); labels.push(prompt.labels[k]); });
    if (prompt.box) {
      const [x0, y0, x1, y1] = prompt.box;
      coords.push(x0 * sx, y0 * sy, x1 * sx, y1 * sy);
      labels.push(2, 3);
    } else {
      coords.push(0, 0);
      labels.push(-1);
    }
    const [mh, mw] = facts.mask_input_size;
    const out = await session.run({
      image_embeddings: embedding,
      point_coords: new ort.Tensor("float32", Float32Array.from(coords), [1, labels.length, 2]),
      point_labels: new ort.Tensor("float32", Float32Array.from(labels), [1, labels.length]),
      mask_input: new ort.Tensor("float32", new Float32Array(mh * mw), [1, 1, mh, mw]),
      has_mask_input: new ort.Tensor("float32", new Float32Array(1), [1]),
    });
    const logits = out.low_res_masks, [, , lowH, lowW] = logits.dims;
    if (!upscale) upscale = makeUpscaler(lowH, lowW);
    const wanted = prompt.multimask_output ? [1, 2, 3] : [0];
    const positions = wanted.map((i) => facts.mask_output_indices.indexOf(i));
    const masks = positions.map((k) => upscale(logits.data, k * lowH * lowW));
    return {masks, scores: positions.map((k) => out.iou_predictions.data[k]),
            areas: masks.map((m) => m.reduce((a, b) => a + b, 0))};
  }

  return {load, setImage, useEmbedding, decode, ready: () => session !== null && embedding !== null};
})();
