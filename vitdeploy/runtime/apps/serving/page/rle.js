// COCO's compressed RLE (pycocotools maskApi.c rleToString / rleFrString): masks in column-major runs, starting with
// zeros; each count from the third on is stored as the difference to the count two before, in 5-bit groups as
// characters 48 + group (0x20: more groups follow, 0x10 in the last group: negative). Arithmetic, not shifts: a count
// can pass 32 bits of shifting.
"use strict";

function cocoRleCounts(text) {
  const counts = [];
  let p = 0;
  while (p < text.length) {
    let x = 0, k = 0, more = true;
    while (more) {
      const c = text.charCodeAt(p) - 48;
      x += (c & 0x1f) * 2 ** (5 * k);
      more = (c & 0x20) !== 0;
      p += 1; k += 1;
      if (!more && (c & 0x10)) x -= 2 ** (5 * k);
    }
    if (counts.length > 2) x += counts[counts.length - 2];
    counts.push(x);
  }
  return counts;
}

function cocoRleDecode(rle) {
  // {size: [height, width], counts: string} -> Uint8Array, row-major (height x width), 1 inside the mask
  const [height, width] = rle.size;
  const mask = new Uint8Array(height * width);
  let at = 0, value = 0;
  for (const run of cocoRleCounts(rle.counts)) {
    if (value) {
      for (let k = at; k < at + run; k++) {
        const column = Math.floor(k / height), row = k - column * height;
        mask[row * width + column] = 1;
      }
    }
    at += run;
    value = 1 - value;
  }
  return mask;
}

function cocoRleEncode(mask, height, width) {
  // Uint8Array, row-major (height x width) -> {size, counts: string}, as pycocotools encodes it
  const counts = [];
  let value = 0, run = 0;
  for (let column = 0; column < width; column++) {
    for (let row = 0; row < height; row++) {
      const bit = mask[row * width + column] ? 1 : 0;
      if (bit !== value) { counts.push(run); run = 0; value = bit; }
      run += 1;
    }
  }
  counts.push(run);
  let text = "";
  counts.forEach((count, i) => {
    let x = i > 2 ? count - counts[i - 2] : count;
    let more = true;
    while (more) {
      let c = ((x % 32) + 32) % 32;      // the low 5 bits, as C's x & 0x1f on a two's-complement long
      x = Math.floor(x / 32);            // arithmetic shift right by 5
      more = (c & 0x10) ? x !== -1 : x !== 0;
      if (more) c |= 0x20;
      text += String.fromCharCode(c + 48);
    }
  });
  return {size: [height, width], counts: text};
}
