// vitdeploy's page: open an image, click points or drag a box, see SAM's mask. Plain JavaScript, no build step and
// nothing from a CDN. The server encodes the image once (POST /v1/embeddings) and decodes every prompt on its cached
// embedding (POST /v1/embeddings/ID/masks); masks come back as COCO RLE, decoded by rle.js. For a SAM decoder that
// is one .onnx file, the page can decode in the browser instead (browser_decoder.js, onnxruntime-web). A SAM 3
// server with its text encoder and detector also finds every instance of a text (POST /v1/embeddings/ID/concepts).
// Served as a static site ('vitdeploy web': <body data-site="site.json">), the page needs no server at all: the
// image is encoded in the browser too (browser_encoder.js), and a parity check compares both files' answers here with
// native ONNX Runtime's on the site's sample image.
"use strict";

const $ = (id) => document.getElementById(id);
const canvas = $("canvas");
const context = canvas.getContext("2d");
const DRAG_PIXELS = 5;  // a press that moves further than this (screen pixels) draws a box instead of a point

const state = {
  image: null,          // the HTMLImageElement shown
  name: "",             // the image file's name (for downloads)
  id: null,             // the server's embedding id
  width: 0, height: 0,  // the original image's size (prompts are in its pixels)
  points: [],           // [{x, y, label}]
  box: null,            // [x0, y0, x1, y1] or null
  history: [],          // undo stack: snapshots of {points, box}
  answer: null,         // the last answer shown: {masks, scores, areas} (a masks answer's first result, or instances)
  kind: "masks",        // what the answer is: "masks" (candidates for the prompt) or "concept" (every instance)
  conceptBody: null,    // the last concept request sent
  concepts: false,      // whether the server finds concepts (/healthz's concepts)
  chosen: 0,            // which candidate mask is shown
  mask: null,           // Uint8Array, row-major height x width, of the chosen mask
  drag: null,           // {x, y, sx, sy} while the mouse is down
  request: 0,           // the number of the latest masks request (older answers are dropped)
  answered: 0,          // masks answers shown so far
  where: "server",      // where prompts are decoded: "server" or "browser"
  browserFacts: null,   // /healthz's browser_decoder: what the page needs to decode itself (null: it cannot)
  site: null,           // the static site's site.json (null: a server serves the page)
  embedding: null,      // the static site: the open image's embedding, computed in this page
  threads: 1,           // onnxruntime-web's WebAssembly threads (more than one needs a cross-origin-isolated page)
  backend: null,        // the static site: {backend: "wasm" or "webgpu", why} (browser_runtime.js's choice)
  check: null,          // the last parity check's report
};

// --- the server ---------------------------------------------------------------------------------------------

async function call(method, path, body, type) {
  const started = performance.now();
  const response = await fetch(path, {method, body, headers: type ? {"Content-Type": type} : {}});
  const elapsed = performance.now() - started;
  const timing = /dur=([0-9.]+)/.exec(response.headers.get("Server-Timing") || "");
  const data = await response.json();
  if (!response.ok) throw new Error(`${response.status}: ${data.error || "error"}`);
  return {data, elapsed, server: timing ? Number(timing[1]) : null};
}

function showTiming(step, result) {
  const body = $("timings").tBodies[0];
  let row = body.querySelector(`tr[data-step="${step}"]`);
  if (!row) {
    row = body.insertRow();
    row.dataset.step = step;
    row.insertCell().textContent = step;
    row.insertCell();
  }
  const server = result.server === null ? "" : ` (server ${result.server.toFixed(1)})`;
  row.cells[1].textContent = `${result.elapsed.toFixed(1)} ms${server}`;
}

function say(text, error = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", error);
}

async function describeServer() {
  try {
    const {data} = await call("GET", "healthz");
    const runtime = data.deployment || data.encoder_runtime || "";
    $("model").textContent = `${data.encoder} + ${data.decoder}` + (data.variant ? ` (SAM ${data.variant})` : "") +
      (runtime ? ` · encoder on ${runtime}` : "") + (data.decoder_runtime ? ` · decoder on ${data.decoder_runtime}` : "");
    state.browserFacts = data.browser_decoder || null;
    $("web-link").hidden = !data.web_page;
    $("where").hidden = !state.browserFacts;
    state.concepts = Boolean(data.concepts);
    $("concept").hidden = !state.concepts;
  } catch (error) {
    $("model").textContent = `the server did not answer /healthz (${error.message})`;
  }
}

// --- opening an image ---------------------------------------------------------------------------------------

async function openImage(file) {
  if (!file) return;
  if (!file.type.startsWith("image/")) { say(`${file.name} is not an image: open a PNG, JPEG or WebP file`, true); return; }
  if (state.site) { await openImageHere(file); return; }
  say(`encoding ${file.name}…`);
  document.body.dataset.state = "encoding";
  const bytes = await file.arrayBuffer();
  const image = new Image();
  image.src = URL.createObjectURL(file);
  try {
    await image.decode();
    const result = await call("POST", "v1/embeddings", bytes, "application/octet-stream");
    Object.assign(state, {image, name: file.name.replace(/\.[^.]+$/, ""), id: result.data.id,
                          width: result.data.width, height: result.data.height});
    reset();
    canvas.width = state.width;
    canvas.height = state.height;
    fit();
    $("drop").classList.add("loaded");
    showTiming(result.data.cached ? "encode (cached)" : "encode", result);
    if (state.where === "browser") await fetchEmbedding();
    say(`${file.name}: ${state.width}x${state.height}. Click the object.`);
    draw();
    document.body.dataset.state = "ready";
  } catch (error) {
    say(`could not open ${file.name}: ${error.message}`, true);
    document.body.dataset.state = "error";
  }
}

function fit() {
  // the image shown as large as the stage allows (small images scaled up, at most 4x); prompts stay in its pixels
  const room = $("drop").clientWidth - 20, tall = window.innerHeight * 0.78;
  const scale = Math.min(room / state.width, tall / state.height, 4);
  canvas.style.width = `${Math.floor(state.width * scale)}px`;
  canvas.style.height = `${Math.floor(state.height * scale)}px`;
}
window.addEventListener("resize", () => { if (state.image) fit(); });

function reset() {
  Object.assign(state, {points: [], box: null, history: [], answer: null, chosen: 0, mask: null, kind: "masks",
                        conceptBody: null});
  showCandidates();
  updateButtons();
}

// --- prompts ------------------------------------------------------------------------------------------------

function remember() {
  state.history.push({points: state.points.slice(), box: state.box && state.box.slice()});
}

function prompt() {
  // the masks request for the current points and box (null when there is none)
  const body = {};
  if (state.points.length) {
    body.points = state.points.map((p) => [p.x, p.y]);
    body.labels = state.points.map((p) => p.label);
  }
  if (state.box) body.box = state.box;
  if (!body.points && !body.box) return null;
  body.multimask_output = state.points.length === 1 && !state.box;
  return body;
}

async function decodeOnServer(body) {
  const result = await call("POST", `v1/embeddings/${state.id}/masks`, JSON.stringify(body), "application/json");
  const answer = result.data.results[0];
  return {step: "decode (server)", result,
          answer: {...answer, rles: answer.masks, masks: answer.masks.map(cocoRleDecode)}};
}

async function decodeInBrowser(body) {
  const started = performance.now();
  const answer = await (here || browserDecoder).decode(body);
  return {step: "decode (browser)", result: {elapsed: performance.now() - started, server: null}, answer};
}

async function decode() {
  const body = prompt();
  const number = ++state.request;
  if (!body) { state.answer = null; state.mask = null; showCandidates(); draw(); updateButtons(); return; }
  document.body.dataset.state = "decoding";
  try {
    const {step, result, answer} = await (state.where === "browser" ? decodeInBrowser(body) : decodeOnServer(body));
    if (number !== state.request) return;  // a newer click's answer is on its way
    state.answer = answer;
    state.kind = "masks";
    const scores = state.answer.scores;
    choose(scores.indexOf(Math.max(...scores)));
    showTiming(step, result);
    state.answered += 1;
    say(`${state.points.length} point(s)${state.box ? " and a box" : ""}: ${scores.length} mask(s)`);
    document.body.dataset.state = "ready";
  } catch (error) {
    if (number !== state.request) return;
    say(error.message, true);
    document.body.dataset.state = "error";
  }
}

function choose(index) {
  state.chosen = index;
  state.mask = state.answer.masks[index];
  showCandidates();
  draw();
  updateButtons();
}

function showCandidates() {
  const box = $("candidates");
  box.replaceChildren();
  if (!state.answer) { box.innerHTML = '<p class="note">none yet</p>'; return; }
  const what = state.kind === "concept" ? "instance" : "mask";
  state.answer.scores.forEach((score, k) => {
    const button = document.createElement("button");
    button.textContent = `${what} ${k + 1}: score ${score.toFixed(3)}, ${state.answer.areas[k]} px`;
    button.classList.toggle("chosen", k === state.chosen);
    button.onclick = () => choose(k);
    box.append(button);
  });
}

function updateButtons() {
  $("find").disabled = !state.id || !state.concepts;
  $("undo").disabled = state.history.length === 0;
  $("clear").disabled = !state.points.length && !state.box;
  $("download-png").disabled = $("download-rle").disabled = !state.mask;
}

// --- drawing ------------------------------------------------------------------------------------------------

const overlay = document.createElement("canvas");

// Instances' colours (the chosen one is drawn over them in the masks' blue, stronger).
const PALETTE = [[230, 159, 0], [0, 158, 115], [204, 121, 167], [240, 228, 66], [86, 180, 233], [213, 94, 0]];

// masks (Uint8Array, row-major, the image's size) over the image, mask m in RGBA colours[m]
function paint(masks, colours) {
  overlay.width = state.width;
  overlay.height = state.height;
  const pixels = new ImageData(state.width, state.height);
  masks.forEach((mask, m) => {
    for (let k = 0; k < mask.length; k++) if (mask[k]) pixels.data.set(colours[m], 4 * k);
  });
  overlay.getContext("2d").putImageData(pixels, 0, 0);
  context.drawImage(overlay, 0, 0);
}

function draw() {
  if (!state.image) return;
  context.drawImage(state.image, 0, 0, state.width, state.height);
  if (state.kind === "concept" && state.answer) {
    const others = state.answer.masks.filter((_, k) => k !== state.chosen);
    paint(others, others.map((_, k) => [...PALETTE[k % PALETTE.length], 110]));
  }
  if (state.mask) paint([state.mask], [[30, 144, 255, 130]]);
  const scale = Math.max(state.width, state.height) / 400;
  if (state.box) {
    context.strokeStyle = "#ffd60a";
    context.lineWidth = 2 * scale;
    const [x0, y0, x1, y1] = state.box;
    context.strokeRect(x0, y0, x1 - x0, y1 - y0);
  }
  for (const p of state.points) {
    context.beginPath();
    context.arc(p.x, p.y, 5 * scale, 0, 2 * Math.PI);
    context.fillStyle = p.label ? "#2da44e" : "#cf222e";
    context.fill();
    context.lineWidth = 1.5 * scale;
    context.strokeStyle = "#fff";
    context.stroke();
  }
}

function imagePoint(event) {
  // the event's position in pixels of the original image (the canvas may be shown smaller)
  const rect = canvas.getBoundingClientRect();
  const x = ((event.clientX - rect.left) / rect.width) * state.width;
  const y = ((event.clientY - rect.top) / rect.height) * state.height;
  return {x: Math.min(Math.max(x, 0), state.width), y: Math.min(Math.max(y, 0), state.height),
          sx: event.clientX, sy: event.clientY};
}

canvas.addEventListener("contextmenu", (event) => event.preventDefault());
canvas.addEventListener("mousedown", (event) => {
  if (!state.id) {
    if (document.body.dataset.state !== "encoding") say("open an image first (the button on the right), then click it", true);
    return;
  }
  state.drag = imagePoint(event);
  state.drag.background = event.button === 2 || event.shiftKey;
});
canvas.addEventListener("mousemove", (event) => {
  if (!state.drag) return;
  const here = imagePoint(event);
  if (Math.hypot(here.sx - state.drag.sx, here.sy - state.drag.sy) > DRAG_PIXELS) {
    draw();
    context.setLineDash([6, 4]);
    context.strokeStyle = "#ffd60a";
    context.strokeRect(state.drag.x, state.drag.y, here.x - state.drag.x, here.y - state.drag.y);
    context.setLineDash([]);
  }
});
window.addEventListener("mouseup", (event) => {
  if (!state.drag) return;
  const start = state.drag, end = imagePoint(event);
  state.drag = null;
  remember();
  if (Math.hypot(end.sx - start.sx, end.sy - start.sy) > DRAG_PIXELS) {
    const [x0, x1] = [start.x, end.x].sort((a, b) => a - b), [y0, y1] = [start.y, end.y].sort((a, b) => a - b);
    if (x1 - x0 < 1 || y1 - y0 < 1) { state.history.pop(); draw(); return; }
    state.box = [x0, y0, x1, y1];
  } else {
    const foreground = document.querySelector('input[name="label"]:checked').value === "1";
    state.points.push({x: start.x, y: start.y, label: start.background || !foreground ? 0 : 1});
  }
  updateButtons();
  draw();
  decode();
});

// --- buttons, keys, files -----------------------------------------------------------------------------------

$("undo").onclick = () => {
  const last = state.history.pop();
  if (!last) return;
  Object.assign(state, last);
  decode();
};
$("clear").onclick = () => { remember(); Object.assign(state, {points: [], box: null}); decode(); };
document.addEventListener("keydown", (event) => {
  if ((event.ctrlKey || event.metaKey) && event.key === "z") { event.preventDefault(); $("undo").onclick(); }
});
$("file").addEventListener("change", (event) => openImage(event.target.files[0]));
const drop = $("drop");
drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (event) => {
  event.preventDefault();
  drop.classList.remove("over");
  openImage(event.dataTransfer.files[0]);
});

function save(blob, name) {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = name;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}

$("download-png").onclick = () => {
  const out = document.createElement("canvas");
  out.width = state.width;
  out.height = state.height;
  const pixels = new ImageData(state.width, state.height);
  state.mask.forEach((v, k) => pixels.data.set(v ? [255, 255, 255, 255] : [0, 0, 0, 255], 4 * k));
  out.getContext("2d").putImageData(pixels, 0, 0);
  out.toBlob((blob) => save(blob, `${state.name}.mask.png`), "image/png");
};
$("download-rle").onclick = () => {
  const rle = state.answer.rles ? state.answer.rles[state.chosen] : cocoRleEncode(state.mask, state.height, state.width);
  const asked = state.kind === "concept" ? state.conceptBody : prompt();
  const record = {image: state.name, prompt: asked, segmentation: rle, decoded_in: state.where,
                  score: state.answer.scores[state.chosen], area: state.answer.areas[state.chosen]};
  save(new Blob([JSON.stringify(record, null, 1)], {type: "application/json"}), `${state.name}.mask.json`);
};

// --- every instance of a concept (SAM 3) ---------------------------------------------------------------------

async function find() {
  const text = $("concept-text").value.trim();
  const body = {confidence_threshold: Number($("concept-threshold").value)};
  if (text) body.text = text;
  if (state.box) body.boxes = [state.box];
  if (!text && !state.box) { say("type a concept (or draw an exemplar box) to find", true); return; }
  const number = ++state.request;
  document.body.dataset.state = "decoding";
  say(`finding every instance of ${text ? `"${text}"` : "the box's object"}…`);
  try {
    const result = await call("POST", `v1/embeddings/${state.id}/concepts`, JSON.stringify(body), "application/json");
    if (number !== state.request) return;
    const instances = result.data.instances;
    state.kind = "concept";
    state.conceptBody = body;
    state.answer = instances.length ? {masks: instances.map((i) => cocoRleDecode(i.segmentation)),
                                       rles: instances.map((i) => i.segmentation), scores: instances.map((i) => i.score),
                                       areas: instances.map((i) => i.area)} : null;
    showTiming("find (server)", result);
    state.answered += 1;
    if (state.answer) {
      choose(state.answer.scores.indexOf(Math.max(...state.answer.scores)));
    } else {
      state.mask = null;
      showCandidates();
      draw();
      updateButtons();
    }
    say(`${instances.length} instance(s) above ${body.confidence_threshold}`);
    document.body.dataset.state = "ready";
  } catch (error) {
    if (number !== state.request) return;
    say(error.message, true);
    document.body.dataset.state = "error";
  }
}

$("find").onclick = find;
$("concept-text").addEventListener("keydown", (event) => { if (event.key === "Enter" && !$("find").disabled) find(); });

// --- where prompts are decoded ------------------------------------------------------------------------------

async function fetchEmbedding() {
  const started = performance.now();
  const shape = await (here || browserDecoder).setImage(state.id, [state.height, state.width]);
  showTiming("embedding to the browser", {elapsed: performance.now() - started, server: null});
  return shape;
}

async function decodeWhere(where) {
  if (where === state.where) return;
  if (where === "browser") {
    document.body.dataset.state = "loading";
    say("loading onnxruntime-web and the decoder…");
    try {
      const started = performance.now();
      // SAM's decoder on the embedding (browser_decoder.js); SAM 2's and SAM 3's on the three feature arrays
      here = (state.browserFacts.model || "sam") === "sam" ? null : browserSam2;
      if (here && typeof ort === "undefined") await browserRuntime.load(1);
      const bytes = await (here ? here.loadDecoder(state.browserFacts) : browserDecoder.load(state.browserFacts));
      showTiming("load decoder (browser)", {elapsed: performance.now() - started, server: null});
      if (state.id) await fetchEmbedding();
      say(`the decoder (${(bytes / 1e6).toFixed(1)} MB) runs in this browser (onnxruntime-web, WebAssembly)`);
    } catch (error) {
      say(`the browser cannot decode: ${error.message}`, true);
      document.querySelector('input[name="where"][value="server"]').checked = true;
      document.body.dataset.state = state.id ? "ready" : "empty";
      return;
    }
  }
  state.where = where;
  document.body.dataset.state = state.id ? "ready" : "empty";
  if (prompt()) decode();
}

document.querySelectorAll('input[name="where"]').forEach((input) => {
  input.addEventListener("change", () => decodeWhere(input.value));
});

// What a test (or a console) can read: the prompt sent, and the chosen mask as "0"/"1" characters, row-major.
window.vitdeployPage = {
  prompt,
  mask: () => (state.mask ? Array.from(state.mask).join("") : null),
  size: () => [state.height, state.width],
  answered: () => state.answered,
  decodeRle: (rle) => Array.from(cocoRleDecode(rle)).join(""),
  encodeRle: (bits, height, width) => cocoRleEncode(Uint8Array.from(bits, (c) => c === "1" ? 1 : 0), height, width),
  where: () => state.where,
  answerScores: () => (state.answer ? Array.from(state.answer.scores) : null),
  kind: () => state.kind,
  instances: () => (state.kind === "concept" ? (state.answer ? state.answer.scores.length : 0) : null),
  conceptBody: () => state.conceptBody,
};

// --- the static site: no server ------------------------------------------------------------------------------

async function isolate() {
  // WebAssembly threads need SharedArrayBuffer, which a page has only when cross-origin isolated (COOP + COEP
  // headers). A host that sends them (_headers in the folder: Netlify, Cloudflare Pages) needs nothing; any other
  // gets them from the site's service worker (coi_worker.js), after one reload. Where neither works: one thread.
  if (window.crossOriginIsolated) { sessionStorage.removeItem("vitdeploy-reloaded"); return; }
  if (!("serviceWorker" in navigator) || !window.isSecureContext) return;
  await navigator.serviceWorker.register("coi_worker.js");
  await navigator.serviceWorker.ready;
  if (sessionStorage.getItem("vitdeploy-reloaded")) return;  // reloaded once already: the browser refuses isolation
  sessionStorage.setItem("vitdeploy-reloaded", "1");
  location.reload();
  await new Promise(() => {});  // the page is going away
}

const megabytes = (bytes) => `${(bytes / 1e6).toFixed(1)} MB`;

// Each model's pair in the page, behind one face: load(site), encode(picture) -> features, use(features, [h, w]),
// decode(prompt) -> {masks, scores, areas}, embeddingOf(features) -> the embedding's Float32Array.
const IN_PAGE = {
  sam: {
    async load(site) {
      return (await browserEncoder.load(site.encoder)) + (await browserDecoder.load(site.decoder));
    },
    encode: (picture) => browserEncoder.encode(picture),
    use: (embedding, imageSize) => browserDecoder.useEmbedding(embedding, imageSize),
    decode: (prompt) => browserDecoder.decode(prompt),
    embeddingOf: (embedding) => embedding.data,
  },
  sam2: browserSam2,
  sam3: browserSam2,  // SAM 3's vision encoder and click decoder take SAM 2's transforms and decoder inputs
};
let here = null;  // the static site's model in the page (IN_PAGE[site.model])

async function openSite(url) {
  document.body.dataset.state = "loading";
  $("model").textContent = "loading the model into this browser…";
  try {
    await isolate();
    state.site = await (await fetch(url)).json();
    here = IN_PAGE[state.site.model];
    if (!here) throw new Error(`this page cannot run a '${state.site.model}' model`);
    state.threads = window.crossOriginIsolated ? Math.max(1, Math.min(4, navigator.hardwareConcurrency || 1)) : 1;
    state.backend = await browserRuntime.choose(state.site.backends || ["wasm"]);
    await browserRuntime.load(state.threads, state.backend.backend);
    const started = performance.now();
    await here.load(state.site);
    showTiming("load model (browser)", {elapsed: performance.now() - started, server: null});
    const {encoder, decoder} = state.site;
    $("model").textContent = `${encoder.name} (${megabytes(encoder.bytes)}) + ${decoder.name} ` +
      `(${megabytes(decoder.bytes)}) · ${state.site.title} · in this browser: onnxruntime-web ` +
      `${ort.env.versions ? ort.env.versions.web : ""}, ` +
      (state.backend.backend === "webgpu" ? "WebGPU for the encoder, WebAssembly for the clicks, " : "WebAssembly, ") +
      `${state.threads} thread(s)` + (window.crossOriginIsolated ? "" : " (the page is not cross-origin isolated)") +
      ` (${state.backend.why})`;
    state.where = "browser";
    $("check").hidden = !state.site.check;
    $("run-check").disabled = false;
    say("open an image");
    document.body.dataset.state = "empty";
  } catch (error) {
    $("model").textContent = `the model could not be loaded into this browser: ${error.message}`;
    document.body.dataset.state = "error";
  }
}

async function openImageHere(file) {
  // the static site's openImage: decoded, checked against the pixel limit, encoded, all in this page
  document.body.dataset.state = "encoding";
  say(`encoding ${file.name} in this browser…`);
  try {
    const picture = await browserEncoder.pixelsOf(file).catch(() => {
      throw new Error(`${file.name} could not be decoded as an image: is the file damaged?`);
    });
    const pixels = picture.width * picture.height, limit = state.site.max_image_pixels;
    if (limit && pixels > limit) {
      throw new Error(`${file.name} is ${picture.width}x${picture.height} (${(pixels / 1e6).toFixed(1)} MP), over ` +
                      `this site's limit of ${(limit / 1e6).toFixed(1)} MP: shrink it first`);
    }
    const started = performance.now();
    const embedding = await here.encode(picture);
    const elapsed = performance.now() - started;
    const image = new Image();
    image.src = URL.createObjectURL(file);
    await image.decode();
    Object.assign(state, {image, name: file.name.replace(/\.[^.]+$/, ""), id: "here", embedding,
                          width: picture.width, height: picture.height});
    here.use(embedding, [picture.height, picture.width]);
    reset();
    canvas.width = state.width;
    canvas.height = state.height;
    fit();
    $("drop").classList.add("loaded");
    showTiming("encode (browser)", {elapsed, server: null});
    say(`${file.name}: ${state.width}x${state.height}. Click the object.`);
    draw();
    document.body.dataset.state = "ready";
  } catch (error) {
    say(`could not open ${file.name}: ${error.message}`, true);
    document.body.dataset.state = state.id ? "ready" : "error";
  }
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

function agreement(ours, theirs) {
  // cosine and largest absolute difference of two float arrays (in float64)
  let dot = 0, a2 = 0, b2 = 0, worst = 0;
  for (let k = 0; k < theirs.length; k++) {
    dot += ours[k] * theirs[k];
    a2 += ours[k] * ours[k];
    b2 += theirs[k] * theirs[k];
    worst = Math.max(worst, Math.abs(ours[k] - theirs[k]));
  }
  return {cosine: dot / Math.sqrt(a2 * b2), maxAbs: worst};
}

function maskIou(a, b) {
  let both = 0, either = 0;
  for (let k = 0; k < a.length; k++) { both += a[k] & b[k]; either += a[k] | b[k]; }
  return either ? both / either : 1;
}

async function runCheck() {
  // the site's sample image encoded and its click decoded here, against native ONNX Runtime's answers on the same
  // files (site.json's check, written by 'vitdeploy web'); times: the second encode, the median of five decodes
  const c = state.site.check, runs = 5;
  $("run-check").disabled = true;
  say("checking against native ONNX Runtime…");
  try {
    const picture = await browserEncoder.pixelsOf(await (await fetch(c.image)).blob());
    let started = performance.now();
    await here.encode(picture);
    const firstEncode = performance.now() - started;
    started = performance.now();
    const embedding = await here.encode(picture);
    const encode = performance.now() - started;
    const reference = new Float32Array(await (await fetch(c.embedding)).arrayBuffer());
    const ours = here.embeddingOf(embedding);
    if (reference.length !== ours.length) throw new Error("the reference embedding has another size");
    const close = agreement(ours, reference);
    const eager = c.eager ? agreement(ours, new Float32Array(await (await fetch(c.eager.embedding)).arrayBuffer())) : null;
    here.use(embedding, [picture.height, picture.width]);
    const times = [];
    let answer = null;
    for (let k = 0; k < runs; k++) {
      started = performance.now();
      answer = await here.decode(c.prompt);
      times.push(performance.now() - started);
    }
    const ious = answer.masks.map((mask, k) => maskIou(mask, cocoRleDecode(c.masks[k])));
    state.check = {embedding_cosine: close.cosine, embedding_max_abs: close.maxAbs, mask_iou: ious,
                   scores: Array.from(answer.scores), native_scores: c.scores,
                   encode_ms: encode, first_encode_ms: firstEncode, decode_ms: median(times),
                   native_encode_ms: c.native_encode_ms, native_decode_ms: c.native_decode_ms,
                   threads: state.threads, isolated: window.crossOriginIsolated, backend: state.backend.backend,
                   eager_cosine: eager ? eager.cosine : null, native_eager_cosine: c.eager ? c.eager.native_cosine : null};
    const rows = [["in this browser", state.backend.backend === "webgpu" ? "WebGPU (encoder), WebAssembly (clicks)"
                                                                        : "WebAssembly"],
                  ["embedding cosine", close.cosine.toFixed(7)], ["embedding max |diff|", close.maxAbs.toExponential(2)],
                  ["mask IoU (worst)", Math.min(...ious).toFixed(4)],
                  ...(eager ? [["cosine vs official eager (native's)",
                                `${eager.cosine.toFixed(7)} (${c.eager.native_cosine.toFixed(7)})`]] : []),
                  ["encode here / native", `${encode.toFixed(1)} / ${c.native_encode_ms.toFixed(1)} ms`],
                  ["decode here / native", `${median(times).toFixed(1)} / ${c.native_decode_ms.toFixed(1)} ms`]];
    const body = $("check-results").tBodies[0];
    body.replaceChildren();
    for (const [what, value] of rows) {
      const row = body.insertRow();
      row.insertCell().textContent = what;
      row.insertCell().textContent = value;
    }
    say(`parity: embedding cosine ${close.cosine.toFixed(7)}, worst mask IoU ${Math.min(...ious).toFixed(4)}`);
  } catch (error) {
    say(`the check could not run: ${error.message}`, true);
  } finally {
    if (state.embedding) here.use(state.embedding, [state.height, state.width]);
    $("run-check").disabled = false;
  }
  return state.check;
}

$("run-check").onclick = runCheck;

Object.assign(window.vitdeployPage, {
  check: runCheck,
  lastCheck: () => state.check,
  embedding: () => (state.embedding ? Array.from(here.embeddingOf(state.embedding)) : null),
  threads: () => state.threads,
  backend: () => state.backend,
  site: () => state.site,
  status: () => $("status").textContent,
});

document.body.dataset.state = "empty";
if (document.body.dataset.site) {
  openSite(document.body.dataset.site);
} else {
  describeServer();
}
