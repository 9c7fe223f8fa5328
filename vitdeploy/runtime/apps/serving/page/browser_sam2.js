// SAM 2's image encoder and decoder in the browser, and SAM 3's vision encoder and interactive (click) decoder,
// which take the same transforms and the same decoder inputs: the arithmetic of vitdeploy's Sam2ImagePredictor and
// Sam3InteractivePredictor (vitdeploy/runtime/processing/sam2_transforms.py, runtime/apps/sam2/image_predictor.py).
// The image: ToTensor (x / 255 in float32), resized to S x S without keeping the aspect ratio (PyTorch's antialiased
// bilinear filter), normalized. A prompt: a box's corners (labels 2, 3) first, then the clicks, in the S x S frame.
// The masks: the decoder's choice among its tokens (multimask: tokens 1.., else token 0, or the stablest multimask
// one where the file asks for dynamic_multimask_via_stability), small holes and sprinkles of the low-resolution
// logits removed where the model does it (SAM 3: holes up to 256 pixels, 8-connected), then PyTorch's bilinear resize
// (align_corners=False) to the image's size, thresholded. Used by the static site ('vitdeploy web') for the whole
// model, and by the served page to decode clicks on the server's features (loadDecoder, setImage).
"use strict";

const browserSam2 = (() => {
  let facts = null, encoder = null, decoder = null, features = null, size = null;
  const f = Math.fround;

  function antialiasTaps(inSize, outSize) {
    // antialias_bilinear_matrix: the triangle filter widened by the scale when shrinking, taps normalised to 1
    const scale = inSize / outSize, support = scale >= 1 ? scale : 1, invscale = scale >= 1 ? 1 / scale : 1, rows = [];
    for (let i = 0; i < outSize; i++) {
      const center = scale * (i + 0.5);
      const lo = Math.max(Math.trunc(center - support + 0.5), 0), hi = Math.min(Math.trunc(center + support + 0.5), inSize);
      const index = [], weight = [];
      let total = 0;
      for (let t = lo; t < hi; t++) {
        const w = Math.max(0, 1 - Math.abs((t - center + 0.5) * invscale));
        index.push(t);
        weight.push(w);
        total += w;
      }
      rows.push({index, weight: weight.map((w) => f(total > 0 ? w / total : 0))});
    }
    return rows;
  }

  function bilinearTaps(inSize, outSize) {
    // bilinear_matrix: PyTorch's area_pixel_compute_source_index in float32, the upper neighbour clamped
    const scale = f(inSize / outSize), rows = [];
    for (let i = 0; i < outSize; i++) {
      const src = Math.max(f(f(scale * f(i + 0.5)) - 0.5), 0);
      const lo = Math.min(Math.trunc(src), inSize - 1), hi = Math.min(lo + 1, inSize - 1);
      const frac = Math.min(Math.max(f(src - lo), 0), 1);
      rows.push(lo === hi ? {index: [lo], weight: [1]} : {index: [lo, hi], weight: [f(1 - frac), f(frac)]});
    }
    return rows;
  }

  function resize(plane, height, width, outH, outW, antialias) {
    // one (height x width) Float32Array plane -> (outH x outW), separable: along x, then along y
    if (height === outH && width === outW) return plane;
    const taps = antialias ? antialiasTaps : bilinearTaps;
    const cols = taps(width, outW), rows = taps(height, outH);
    const wide = new Float64Array(height * outW);
    for (let y = 0; y < height; y++) {
      for (let x = 0; x < outW; x++) {
        const {index, weight} = cols[x];
        let sum = 0;
        for (let t = 0; t < index.length; t++) sum += weight[t] * plane[y * width + index[t]];
        wide[y * outW + x] = sum;
      }
    }
    const out = new Float32Array(outH * outW);
    for (let y = 0; y < outH; y++) {
      const {index, weight} = rows[y];
      for (let x = 0; x < outW; x++) {
        let sum = 0;
        for (let t = 0; t < index.length; t++) sum += weight[t] * wide[index[t] * outW + x];
        out[y * outW + x] = sum;
      }
    }
    return out;
  }

  function replaceSmallRegions(scores, height, width, inRegion, maxArea, value) {
    // every 8-connected component of the pixels where inRegion(score) holds, of at most maxArea pixels, set to value
    const seen = new Uint8Array(height * width), stack = [], members = [];
    for (let start = 0; start < seen.length; start++) {
      if (seen[start] || !inRegion(scores[start])) continue;
      seen[start] = 1;
      stack.push(start);
      members.length = 0;
      while (stack.length) {
        const p = stack.pop(), py = Math.floor(p / width), px = p - py * width;
        members.push(p);
        for (let dy = -1; dy <= 1; dy++) {
          for (let dx = -1; dx <= 1; dx++) {
            const y = py + dy, x = px + dx, q = y * width + x;
            if (y < 0 || y >= height || x < 0 || x >= width || seen[q] || !inRegion(scores[q])) continue;
            seen[q] = 1;
            stack.push(q);
          }
        }
      }
      if (members.length <= maxArea) for (const p of members) scores[p] = value;
    }
  }

  function maskOf(low, lowH, lowW, height, width, d) {
    // Sam2Transforms.postprocess_masks, thresholded: one token's (lowH x lowW) logits (changed in place) -> the
    // image's mask (Uint8Array, height x width)
    const threshold = d.mask_threshold;
    const background = Uint8Array.from(low, (v) => (v <= threshold ? 1 : 0));  // both regions from the logits
    if (d.max_hole_area > 0) {
      const holes = Uint8Array.from(background);
      replaceSmallRegions(holes, lowH, lowW, (v) => v === 1, d.max_hole_area, 2);
      holes.forEach((v, k) => { if (v === 2) low[k] = threshold + 10; });
    }
    if (d.max_sprinkle_area > 0) {
      const sprinkles = Uint8Array.from(background);
      replaceSmallRegions(sprinkles, lowH, lowW, (v) => v === 0, d.max_sprinkle_area, 2);
      sprinkles.forEach((v, k) => { if (v === 2) low[k] = threshold - 10; });
    }
    const full = resize(low, lowH, lowW, height, width, false);
    return Uint8Array.from(full, (v) => (v > threshold ? 1 : 0));
  }

  async function load(site) {
    facts = site;
    let bytes = 0;
    for (const [role, file] of [["encoder", site.encoder], ["decoder", site.decoder]]) {
      const data = await (await fetch(file.url)).arrayBuffer();
      const providers = role === "encoder" ? browserRuntime.encoderProviders() : browserRuntime.decoderProviders();
      const session = await ort.InferenceSession.create(data, {executionProviders: providers});
      if (role === "encoder") encoder = session; else decoder = session;
      bytes += data.byteLength;
    }
    return bytes;
  }

  async function loadDecoder(serverFacts) {
    // the served page's in-browser decoding: the decoder file from the server, on the features the server computed
    facts = {encoder: {input_size: serverFacts.input_size}, decoder: serverFacts};
    const data = await (await fetch(serverFacts.url)).arrayBuffer();
    decoder = await ort.InferenceSession.create(data, {executionProviders: browserRuntime.decoderProviders()});
    return data.byteLength;
  }

  async function setImage(id, imageSize) {
    // the server's features of embedding `id` (each array as float32, its shape in X-Embedding-Shape)
    const named = {};
    for (const name of facts.decoder.features) {
      const response = await fetch(`v1/embeddings/${id}/embedding?feature=${encodeURIComponent(name)}`);
      if (!response.ok) throw new Error(`${response.status}: ${(await response.json()).error}`);
      const shape = response.headers.get("X-Embedding-Shape").split(",").map(Number);
      named[name] = new ort.Tensor("float32", new Float32Array(await response.arrayBuffer()), shape);
    }
    use(named, imageSize);
    return named.image_embed.dims;
  }

  async function encode(picture) {
    // {rgb, width, height} -> the features by name (ort.Tensors)
    const s = facts.encoder.input_size, {rgb, width, height} = picture, data = new Float32Array(3 * s * s);
    for (let c = 0; c < 3; c++) {
      const plane = new Float32Array(width * height);
      for (let k = 0; k < plane.length; k++) plane[k] = f(rgb[3 * k + c] / 255);
      const resized = resize(plane, height, width, s, s, true);
      const mean = f(f(facts.encoder.pixel_mean[c]) / 255), std = f(f(facts.encoder.pixel_std[c]) / 255);
      for (let k = 0; k < s * s; k++) data[c * s * s + k] = f(f(f(resized[k]) - mean) / std);
    }
    return encoder.run({[facts.encoder.input_name]: new ort.Tensor("float32", data, [1, 3, s, s])});
  }

  function use(encoded, imageSize) {
    features = encoded;
    size = imageSize;
  }

  function choose(logits, iou, count, multimask) {
    // MaskChoice: the token indices of the masks returned
    if (multimask) return Array.from({length: count - 1}, (_, k) => k + 1);
    const {dynamic, delta, thresh} = facts.decoder.mask_choice;
    if (!dynamic) return [0];
    const plane = logits.length / count;
    let inside = 0, union = 0;
    for (let k = 0; k < plane; k++) { inside += logits[k] > delta; union += logits[k] > -delta; }
    if ((union > 0 ? inside / union : 1) >= thresh) return [0];
    let best = 1;
    for (let k = 2; k < count; k++) if (iou[k] > iou[best]) best = k;
    return [best];
  }

  async function decode(prompt) {
    // {points, labels, box, multimask_output} in pixels of the original image -> {masks, scores, areas}
    const [height, width] = size, s = facts.encoder.input_size, d = facts.decoder;
    const toFrame = (x, y) => [f(f(f(x) / f(width)) * s), f(f(f(y) / f(height)) * s)];
    const coords = [], labels = [];
    if (prompt.box) {
      const [x0, y0, x1, y1] = prompt.box;
      coords.push(...toFrame(x0, y0), ...toFrame(x1, y1));
      labels.push(2, 3);
    }
    (prompt.points || []).forEach(([x, y], k) => { coords.push(...toFrame(x, y)); labels.push(prompt.labels[k]); });
    const embed = features.image_embed, grid = embed.dims[embed.dims.length - 1];
    const out = await decoder.run({
      image_embed: embed, high_res_feats_0: features.high_res_feats_0, high_res_feats_1: features.high_res_feats_1,
      point_coords: new ort.Tensor("float32", Float32Array.from(coords), [1, labels.length, 2]),
      point_labels: new ort.Tensor("float32", Float32Array.from(labels), [1, labels.length]),
      mask_input: new ort.Tensor("float32", new Float32Array(16 * grid * grid), [1, 1, 4 * grid, 4 * grid]),
      has_mask_input: new ort.Tensor("float32", new Float32Array(1), [1]),
    });
    const logits = out.low_res_masks, [, count, lowH, lowW] = logits.dims, iou = out.iou_predictions.data;
    const chosen = choose(logits.data, iou, count, Boolean(prompt.multimask_output));
    const masks = chosen.map((token) => maskOf(logits.data.slice(token * lowH * lowW, (token + 1) * lowH * lowW),
                                                 lowH, lowW, height, width, d));
    return {masks, scores: chosen.map((token) => iou[token]), areas: masks.map((m) => m.reduce((a, b) => a + b, 0))};
  }

  return {load, loadDecoder, setImage, encode, use, decode, embeddingOf: (encoded) => encoded.image_embed.data, resize, maskOf};
})();
