// onnxruntime-web in the page: which of its builds runs the model, on how many threads. The site offers the builds
// its folder holds (site.json's "backends"): "wasm" (WebAssembly, SIMD, threads where the page is cross-origin
// isolated) and, where the package has it, "webgpu" (the build whose WebGPU execution provider runs on the GPU, with
// WebAssembly for what WebGPU does not run). The page picks WebGPU where the browser has a hardware adapter and
// WebAssembly elsewhere: a software adapter (Chromium's SwiftShader, which WebGPU reports as a fallback adapter)
// runs shaders on the CPU, where WebAssembly's SIMD kernels are the CPU's own path. ?backend=wasm or ?backend=webgpu
// in the page's address picks one instead. The encoder runs on the chosen provider; the click decoder stays on
// WebAssembly, which answers a click without a GPU round trip.
"use strict";

const browserRuntime = (() => {
  let backend = "wasm", adapter = null;

  function loadScript(src) {
    return new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = src;
      script.onload = resolve;
      script.onerror = () => reject(new Error(`could not load ${src}`));
      document.head.append(script);
    });
  }

  async function gpuAdapter() {
    if (!navigator.gpu) return null;
    try { return await navigator.gpu.requestAdapter(); } catch { return null; }
  }

  const isFallback = (found) => Boolean(found.info ? found.info.isFallbackAdapter : found.isFallbackAdapter);

  async function choose(offered = ["wasm"]) {
    // -> {backend, why}: the build this browser runs the site's model with
    const asked = new URLSearchParams(location.search).get("backend");
    if (asked) {
      if (!offered.includes(asked)) {
        throw new Error(`this site has no '${asked}' runtime (it has ${offered.join(", ")}): remove ?backend= from the address`);
      }
      if (asked === "webgpu" && !(adapter = await gpuAdapter())) {
        throw new Error("this browser has no WebGPU adapter: open the page without ?backend=webgpu");
      }
      return {backend: asked, why: "asked for in the address"};
    }
    if (!offered.includes("webgpu")) return {backend: "wasm", why: "the site holds the WebAssembly build only"};
    const found = await gpuAdapter();
    if (!found) return {backend: "wasm", why: "this browser has no WebGPU adapter"};
    if (isFallback(found)) return {backend: "wasm", why: "this browser's WebGPU adapter is a software one"};
    adapter = found;
    return {backend: "webgpu", why: "this browser has a WebGPU adapter"};
  }

  async function load(threads = 1, which = "wasm") {
    // onnxruntime-web from the package (page/ort/); more than one thread needs a cross-origin-isolated page
    if (typeof ort === "undefined") {
      await loadScript(which === "webgpu" ? "page/ort/ort.webgpu.min.js" : "page/ort/ort.wasm.min.js");
      backend = which;
    }
    ort.env.wasm.wasmPaths = new URL("page/ort/", document.baseURI).href;
    ort.env.wasm.numThreads = threads;
    if (backend === "webgpu" && adapter) ort.env.webgpu.adapter = adapter;  // the adapter the choice looked at
  }

  return {
    choose,
    load,
    backend: () => backend,
    // the execution providers of the image encoder's session, and of a click decoder's
    encoderProviders: () => (backend === "webgpu" ? ["webgpu", "wasm"] : ["wasm"]),
    decoderProviders: () => ["wasm"],
  };
})();
