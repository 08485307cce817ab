/**
 * sharp's `resize({ width, height, fit: 'fill', kernel: 'lanczos3' })` on 8-bit pixels, computed as
 * libvips 8.18 (the libvips sharp 0.35 ships) computes it, in integers where it does. This is what
 * transformers.js runs in Node for an image processor's `do_resize` with `resample: 1` (Lanczos), the
 * setting of every SmolVLM / Idefics3 folder, so a served folder sees the pixels transformers.js sees.
 *
 * libvips's `vips_resize` with the lanczos3 kernel is not one filter but up to four steps, in order:
 * - an axis shrunk by 4× or more is first box-averaged by an integer factor (`vips_shrinkv` / `shrinkh`,
 *   the reducers' `gap` of 2: floor(factor / 2)), rounded through a 2^-24 fixed-point reciprocal;
 * - the rest of a reduction is a Lanczos-3 convolution (`vips_reducev`, then `vips_reduceh`): a
 *   (2·rint(3·shrink) + 1)-tap mask, one of 65 sub-pixel phases, its weights truncated to 12-bit
 *   fixed point, edge pixels repeated;
 * - an axis that grows is not Lanczos at all: libvips enlarges with `vips_affine` and its bicubic
 *   (Catmull-Rom) interpolator, 12-bit fixed point, rows first, with libvips 8.18's input offset of
 *   half a pixel (which also shifts an axis that keeps its size when the other one grows).
 * The positions are doubles stepped as libvips steps them. libvips steps vertical positions from the
 * top of the strip it is asked for, which its thread pool decides; here from the image's top edge, so
 * a row's phase could differ by 1/64 pixel where a position falls within rounding of a phase boundary
 * (a level at most). test/node/vlm-resize.test.ts finds every pixel equal to sharp's on 640×480
 * images shrunk, enlarged and both.
 */

/** One interleaved 8-bit image. */
export interface Pixels {
  data: Uint8Array;
  width: number;
  height: number;
  channels: number;
}

const SCALE = 64; // VIPS_TRANSFORM_SCALE: sub-pixel phases
const SHIFT = 12; // VIPS_INTERPOLATE_SHIFT: fixed-point weights
const GAP = 2; // vips_resize's default reducing gap

/** C's rint(): nearest, ties to even. */
function rint(x: number): number {
  const r = Math.round(x);
  return r - x === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

const sinc = (x: number) => (x === 0 ? 1 : Math.sin(x * Math.PI) / (x * Math.PI));
const lanczos3 = (x: number) => (x >= -3 && x <= 3 ? sinc(x) * sinc(x / 3) : 0);

/** The 65 phases' masks of `vips_reduce_make_mask`, as 12-bit shorts. */
function reduceMasks(n: number, shrink: number): Int16Array[] {
  const masks: Int16Array[] = [];
  for (let t = 0; t <= SCALE; t++) {
    const x = Math.fround(t / SCALE);
    const half = x + n / 2 - 1;
    const c = new Float64Array(n);
    let sum = 0;
    for (let i = 0; i < n; i++) sum += c[i] = lanczos3((i - half) / shrink);
    masks.push(Int16Array.from(c, (v) => Math.trunc((v / sum) * (1 << SHIFT))));
  }
  return masks;
}

/** The phase libvips picks for a position: round-to-nearest 64th through a doubled, truncated index. */
const phase = (p: number) => ((Math.trunc(p * SCALE * 2) & (SCALE * 2 - 1)) + 1) >> 1;

/** Box average by an integer factor along one axis (`vips_shrinkv` / `vips_shrinkh`, ceil). */
function shrink(img: Pixels, k: number, vertical: boolean): Pixels {
  const { width: w, height: h, channels: ch, data } = img;
  const ow = vertical ? w : Math.ceil(w / k), oh = vertical ? Math.ceil(h / k) : h;
  const out = new Uint8Array(ow * oh * ch);
  const mult = Math.floor(2 ** 32 / (256 * k)), amend = k >> 1;
  if (vertical) {
    // k whole input rows summed into acc, then scaled: the sums of the per-pixel loop, row-wise.
    const row = w * ch, acc = new Int32Array(row);
    for (let y = 0; y < oh; y++) {
      acc.fill(amend);
      for (let j = 0; j < k; j++) {
        const s = Math.min(y * k + j, h - 1) * row;
        for (let x = 0; x < row; x++) acc[x]! += data[s + x]!;
      }
      const dst = y * row;
      for (let x = 0; x < row; x++) out[dst + x] = Math.imul(acc[x]!, mult) >>> 24;
    }
    return { data: out, width: ow, height: oh, channels: ch };
  }
  for (let y = 0; y < oh; y++) {
    const src = y * w * ch, dst = y * ow * ch;
    for (let x = 0; x < ow; x++) {
      for (let c = 0; c < ch; c++) {
        let sum = amend;
        for (let j = 0; j < k; j++) sum += data[src + Math.min(x * k + j, w - 1) * ch + c]!;
        out[dst + x * ch + c] = Math.imul(sum, mult) >>> 24;
      }
    }
  }
  return { data: out, width: ow, height: oh, channels: ch };
}

/** `vips_reducev` / `vips_reduceh` with the lanczos3 kernel and a gap of 2. */
function reduce(img: Pixels, factor: number, vertical: boolean): Pixels {
  const size = vertical ? img.height : img.width;
  const outSize = Math.trunc(size / factor + 0.5);
  let extra = outSize * factor - size;
  let residual = factor;
  const int = Math.max(1, Math.floor(size / outSize / GAP));
  if (int > 1) {
    img = shrink(img, int, vertical);
    extra /= int;
    residual /= int;
  }
  if (residual === 1) return img;
  const n = 2 * rint(3 * residual) + 1;
  const masks = reduceMasks(n, residual);
  const offset = (1 + extra) / 2 - 1;
  const pad = Math.ceil(n / 2) - 1;
  const { width: w, height: h, channels: ch, data } = img;
  const inSize = vertical ? h : w;
  // Each output position's taps (source indices, edges repeated) and weights, flat.
  const taps = new Int32Array(outSize * n), weights = new Int32Array(outSize * n);
  let P = 0.5 * residual - 0.5 - offset;
  for (let o = 0; o < outSize; o++) {
    const start = Math.trunc(P) - pad, k = masks[phase(P)]!;
    for (let i = 0; i < n; i++) {
      taps[o * n + i] = Math.min(Math.max(start + i, 0), inSize - 1);
      weights[o * n + i] = k[i]!;
    }
    P += residual;
  }
  const round = 1 << (SHIFT - 1);
  if (vertical) {
    // Each output row is a weighted sum of up to n input rows: the row's taps gathered first (zero
    // weights dropped, a row repeated at an edge taken once with its weights added: the same
    // integer sums), then each output byte summed in a register.
    const row = w * ch, out = new Uint8Array(outSize * row);
    const rows = new Int32Array(n), ks = new Int32Array(n), acc = new Int32Array(row);
    for (let o = 0; o < outSize; o++) {
      let m = 0;
      for (let i = 0; i < n; i++) {
        const k = weights[o * n + i]!, r = taps[o * n + i]! * row;
        if (k === 0) continue;
        if (m > 0 && rows[m - 1] === r) ks[m - 1]! += k;
        else {
          rows[m] = r;
          ks[m++] = k;
        }
      }
      // Six taps a pass, their rows and weights in locals: the sums stay in acc between passes.
      acc.fill(round);
      for (let j = 0; j < m; j += 6) {
        const k0 = ks[j]!, r0 = rows[j]!;
        const k1 = j + 1 < m ? ks[j + 1]! : 0, r1 = j + 1 < m ? rows[j + 1]! : r0;
        const k2 = j + 2 < m ? ks[j + 2]! : 0, r2 = j + 2 < m ? rows[j + 2]! : r0;
        const k3 = j + 3 < m ? ks[j + 3]! : 0, r3 = j + 3 < m ? rows[j + 3]! : r0;
        const k4 = j + 4 < m ? ks[j + 4]! : 0, r4 = j + 4 < m ? rows[j + 4]! : r0;
        const k5 = j + 5 < m ? ks[j + 5]! : 0, r5 = j + 5 < m ? rows[j + 5]! : r0;
        for (let x = 0; x < row; x++) {
          acc[x] = acc[x]! + k0 * data[r0 + x]! + k1 * data[r1 + x]! + k2 * data[r2 + x]! + k3 * data[r3 + x]! + k4 * data[r4 + x]! + k5 * data[r5 + x]!;
        }
      }
      const dst = o * row;
      for (let x = 0; x < row; x++) {
        const v = acc[x]! >> SHIFT;
        out[dst + x] = v < 0 ? 0 : v > 255 ? 255 : v;
      }
    }
    return { data: out, width: w, height: outSize, channels: ch };
  }
  // Each output pixel's taps as a run of consecutive input pixels: a pixel repeated at an edge taken
  // once with its weights added, zero weights trimmed from the ends (the same integer sums).
  const first = new Int32Array(outSize), count = new Int32Array(outSize), wts = new Int32Array(outSize * n);
  for (let o = 0; o < outSize; o++) {
    let m = 0, prev = -1;
    for (let i = 0; i < n; i++) {
      const t = taps[o * n + i]!, k = weights[o * n + i]!;
      if (t === prev) wts[o * n + m - 1]! += k;
      else {
        if (m === 0) first[o] = t;
        wts[o * n + m++] = k;
        prev = t;
      }
    }
    let lo = 0;
    while (m > 1 && wts[o * n + lo] === 0) lo++, m--;
    while (m > 1 && wts[o * n + lo + m - 1] === 0) m--;
    if (lo > 0) wts.copyWithin(o * n, o * n + lo, o * n + lo + m);
    first[o]! += lo;
    count[o] = m;
  }
  const out = new Uint8Array(h * outSize * ch);
  const clip = (v: number) => (v < 0 ? 0 : v > 255 ? 255 : v);
  for (let l = 0; l < h; l++) {
    const src = l * w * ch, dst = l * outSize * ch;
    if (ch === 3) {
      // RGB, the processors' case: the three channels of a tap share its weight.
      for (let o = 0; o < outSize; o++) {
        let r = round, g = round, b = round;
        const t0 = o * n, m = count[o]!;
        for (let i = 0, p = src + first[o]! * 3; i < m; i++, p += 3) {
          const k = wts[t0 + i]!;
          r += k * data[p]!;
          g += k * data[p + 1]!;
          b += k * data[p + 2]!;
        }
        const q = dst + o * 3;
        out[q] = clip(r >> SHIFT);
        out[q + 1] = clip(g >> SHIFT);
        out[q + 2] = clip(b >> SHIFT);
      }
      continue;
    }
    for (let o = 0; o < outSize; o++) {
      const t0 = o * n, m = count[o]!, p0 = src + first[o]! * ch;
      for (let c = 0; c < ch; c++) {
        let sum = round;
        for (let i = 0; i < m; i++) sum += wts[t0 + i]! * data[p0 + i * ch + c]!;
        out[dst + o * ch + c] = clip(sum >> SHIFT);
      }
    }
  }
  return { data: out, width: outSize, height: h, channels: ch };
}

/** Catmull-Rom weights as `calculate_coefficients_catmull` writes them, truncated to 12 bits. */
const BICUBIC: Int32Array[] = Array.from({ length: SCALE + 1 }, (_, t) => {
  const x = Math.fround(t / SCALE);
  const cr1 = 1 - x, cr2 = -0.5 * x, cr3 = cr1 * cr2;
  const one = cr1 * cr3, fou = x * cr3, cr4 = fou - one;
  return Int32Array.from([one, cr1 - one + cr4, x - fou - cr4, fou], (v) => Math.trunc(v * (1 << SHIFT)));
});

/**
 * `vips_affine(a, 0, 0, d)` with the bicubic interpolator, `idx = idy = 0.5`, edges copied: each
 * output pixel's 4 × 4 neighbourhood, rows weighted first, each sum rounded to 8 bits. A row's
 * weighted sums depend on the input row and the output column only, so each input row's are
 * computed once and the output rows weight four of them.
 */
function enlarge(img: Pixels, a: number, d: number): Pixels {
  const { width: w, height: h, channels: ch, data } = img;
  const tmp = 1 / (a * d);
  const ia = tmp * d, id = tmp * a;
  const round = (v: number) => Math.trunc(v > 0 ? v + 0.5 : v - 0.5);
  const ow = round(a * w), oh = round(d * h);
  // Input space: the image embedded with 2 pixels left and top (window offset 1, border 1); the
  // transform's input offset 0.5 less the border's 1.
  const idx = 0.5 - 1;
  const half = 1 << (SHIFT - 1);
  const cols = new Int32Array(ow * 4), cw = new Int32Array(ow * 4);
  let ix = ia * 0 - idx + 1;
  for (let x = 0; x < ow; x++) {
    const c0 = Math.trunc(ix) - 1 - 2, k = BICUBIC[phase(ix)]!;
    for (let j = 0; j < 4; j++) {
      cols[x * 4 + j] = Math.min(Math.max(c0 + j, 0), w - 1) * ch;
      cw[x * 4 + j] = k[j]!;
    }
    ix += ia;
  }
  // Each input row's horizontal sums, on demand (rows repeat at the edges and between output rows).
  const rowSums = new Map<number, Int32Array>();
  const sumsOf = (r: number): Int32Array => {
    let s = rowSums.get(r);
    if (s) return s;
    s = new Int32Array(ow * ch);
    const src = r * w * ch;
    for (let x = 0; x < ow; x++) {
      const q = x * 4;
      for (let c = 0; c < ch; c++) {
        const p = src + c;
        s[x * ch + c] = (cw[q]! * data[p + cols[q]!]! + cw[q + 1]! * data[p + cols[q + 1]!]! + cw[q + 2]! * data[p + cols[q + 2]!]! + cw[q + 3]! * data[p + cols[q + 3]!]! + half) >> SHIFT;
      }
    }
    rowSums.set(r, s);
    return s;
  };
  const out = new Uint8Array(ow * oh * ch);
  const row = ow * ch;
  for (let y = 0; y < oh; y++) {
    const iy = id * y - idx + 1;
    const top = Math.trunc(iy) - 1 - 2, yw = BICUBIC[phase(iy)]!;
    const [r0, r1, r2, r3] = [0, 1, 2, 3].map((j) => sumsOf(Math.min(Math.max(top + j, 0), h - 1)));
    // Rows above the window are not needed again (the window only moves down).
    for (const r of rowSums.keys()) if (r < top) rowSums.delete(r);
    const [k0, k1, k2, k3] = [yw[0]!, yw[1]!, yw[2]!, yw[3]!];
    const dst = y * row;
    for (let x = 0; x < row; x++) {
      const v = (k0 * r0![x]! + k1 * r1![x]! + k2 * r2![x]! + k3 * r3![x]! + half) >> SHIFT;
      out[dst + x] = v < 0 ? 0 : v > 255 ? 255 : v;
    }
  }
  return { data: out, width: ow, height: oh, channels: ch };
}

/** The image brought to `width` × `height` as sharp's lanczos3 `fill` resize brings it (see the file comment). */
export function resizeLanczos3(img: Pixels, width: number, height: number): Pixels {
  if (img.width === width && img.height === height) return img;
  // sharp's ResolveShrink (fit fill), then vips_resize's scales.
  const hshrink = Math.min(img.width / width, img.width), vshrink = Math.min(img.height / height, img.height);
  let hscale = 1 / hshrink, vscale = 1 / vshrink;
  hscale = Math.max(hscale, 1 / img.width);
  vscale = Math.max(vscale, 1 / img.height);
  let out = img;
  if (vscale < 1) out = reduce(out, 1 / vscale, true);
  if (hscale < 1) out = reduce(out, 1 / hscale, false);
  if (hscale > 1 || vscale > 1) out = enlarge(out, hscale > 1 ? hscale : 1, vscale > 1 ? vscale : 1);
  return out;
}
