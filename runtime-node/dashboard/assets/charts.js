/**
 * A line chart on a canvas, small enough to read: time on x (the last `windowMs`), one line per series,
 * the y scale from 0 to the largest value shown, a gap where a value is null. Redrawn whole on each
 * poll; a few hundred points per chart cost well under a millisecond.
 */

export const PALETTE = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#ca8a04', '#db2777'];

/** `series`: [{ name, color, points: [[timeMs, value|null], ...] }]. */
export function drawLineChart(canvas, series, { nowMs, windowMs, unit = '' }) {
  const dpr = globalThis.devicePixelRatio || 1;
  const w = canvas.clientWidth || canvas.width;
  const h = canvas.clientHeight || canvas.height;
  if (canvas.width !== Math.round(w * dpr)) canvas.width = Math.round(w * dpr);
  if (canvas.height !== Math.round(h * dpr)) canvas.height = Math.round(h * dpr);
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  const pad = { l: 48, r: 8, t: 8, b: 18 };
  const pw = w - pad.l - pad.r;
  const ph = h - pad.t - pad.b;
  let max = 0;
  for (const s of series) for (const [t, v] of s.points) if (v !== null && t >= nowMs - windowMs && v > max) max = v;
  max = niceCeil(max);
  ctx.strokeStyle = '#e3e6ea';
  ctx.fillStyle = '#555';
  ctx.font = '11px system-ui, sans-serif';
  ctx.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = pad.t + ph - (ph * i) / 4;
    ctx.beginPath();
    ctx.moveTo(pad.l, y);
    ctx.lineTo(pad.l + pw, y);
    ctx.stroke();
    ctx.fillText(fmt((max * i) / 4) + unit, 2, y + 4);
  }
  ctx.fillText(`-${Math.round(windowMs / 1000)} s`, pad.l, h - 4);
  ctx.fillText('now', pad.l + pw - 22, h - 4);
  const x = (t) => pad.l + pw * (1 - (nowMs - t) / windowMs);
  const y = (v) => pad.t + ph - (max > 0 ? (ph * v) / max : 0);
  ctx.lineWidth = 2;
  for (const s of series) {
    ctx.strokeStyle = s.color;
    ctx.fillStyle = s.color;
    ctx.beginPath();
    let pen = false;
    let last;
    for (const [t, v] of s.points) {
      if (t < nowMs - windowMs || v === null) {
        pen = false;
        continue;
      }
      if (pen) ctx.lineTo(x(t), y(v));
      else ctx.moveTo(x(t), y(v));
      pen = true;
      last = [t, v];
    }
    ctx.stroke();
    // The newest point as a dot, so a series with one point still shows.
    if (last) {
      ctx.beginPath();
      ctx.arc(x(last[0]), y(last[1]), 3, 0, Math.PI * 2);
      ctx.fill();
    }
  }
}

function niceCeil(v) {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function fmt(v) {
  return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
}
