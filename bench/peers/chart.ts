/**
 * The ratio chart of bench:peers as a PNG: an SVG drawn here, rendered by resvg (@resvg/resvg-js,
 * a prebuilt binary from npm: offline, no browser to start, the same pixels on every run).
 * Two panels: throughput relative to Kafka Streams (same guarantee) and to the raw ceiling.
 */
import { Resvg } from "@resvg/resvg-js";

export interface Bar { workload: string; engine: string; vsKs: number; vsCeiling: number }

const COLORS = ["#2b6cb0", "#90cdf4", "#c05621", "#fbd38d", "#2f855a", "#9ae6b4"];

export function renderChart(bars: Bar[], title: string): Buffer {
  const workloads = [...new Set(bars.map((b) => b.workload))];
  const engines = [...new Set(bars.map((b) => b.engine))];
  const barH = 14, groupGap = 14, left = 110, panelW = 380, gap = 60, top = 70;
  const groupH = engines.length * barH + groupGap;
  const height = top + workloads.length * groupH + 40 + 22 * Math.ceil(engines.length / 2);
  const width = left + 2 * panelW + gap + 30;
  const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;");
  const parts: string[] = [`<rect width="${width}" height="${height}" fill="white"/>`, `<text x="${width / 2}" y="24" text-anchor="middle" font-size="15" font-weight="bold">${esc(title)}</text>`];

  const panel = (x0: number, label: string, value: (b: Bar) => number) => {
    const finite = bars.map(value).filter(Number.isFinite);
    const max = Math.max(1.1, ...finite) * 1.08;
    const sx = (v: number) => x0 + (v / max) * panelW;
    parts.push(`<text x="${x0 + panelW / 2}" y="50" text-anchor="middle" font-size="13">${esc(label)}</text>`);
    for (let t = 0; t <= max; t += max > 4 ? 1 : max > 2 ? 0.5 : 0.25) {
      parts.push(`<line x1="${sx(t)}" y1="${top - 6}" x2="${sx(t)}" y2="${top + workloads.length * groupH - groupGap}" stroke="#e2e8f0"/>`, `<text x="${sx(t)}" y="${top + workloads.length * groupH}" text-anchor="middle" font-size="10" fill="#4a5568">${t.toFixed(2)}</text>`);
    }
    workloads.forEach((w, wi) => {
      engines.forEach((e, ei) => {
        const b = bars.find((x) => x.workload === w && x.engine === e);
        const y = top + wi * groupH + ei * barH;
        const v = b ? value(b) : NaN;
        if (Number.isFinite(v)) {
          parts.push(`<rect x="${x0}" y="${y}" width="${Math.max(1, sx(v) - x0)}" height="${barH - 2}" fill="${COLORS[ei % COLORS.length]}"/>`, `<text x="${sx(v) + 4}" y="${y + barH - 4}" font-size="10">${v.toFixed(2)}</text>`);
        } else {
          parts.push(`<text x="${x0 + 4}" y="${y + barH - 4}" font-size="10" fill="#c53030">no result</text>`);
        }
      });
    });
    parts.push(`<line x1="${sx(1)}" y1="${top - 6}" x2="${sx(1)}" y2="${top + workloads.length * groupH - groupGap}" stroke="#1a202c" stroke-dasharray="4 3"/>`);
  };
  workloads.forEach((w, wi) => parts.push(`<text x="${left - 10}" y="${top + wi * groupH + (engines.length * barH) / 2 + 4}" text-anchor="end" font-size="13">${esc(w)}</text>`));
  panel(left, "rows/s ÷ Kafka Streams (same guarantee)", (b) => b.vsKs);
  panel(left + panelW + gap, "rows/s ÷ raw ceiling (Kafka's perf tools)", (b) => b.vsCeiling);
  const ly = top + workloads.length * groupH + 24;
  engines.forEach((e, ei) => {
    const x = left + (ei % 2) * (panelW + gap), y = ly + Math.floor(ei / 2) * 22;
    parts.push(`<rect x="${x}" y="${y}" width="12" height="12" fill="${COLORS[ei % COLORS.length]}"/>`, `<text x="${x + 18}" y="${y + 11}" font-size="12">${esc(e)}</text>`);
  });
  const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="DejaVu Sans, sans-serif">${parts.join("")}</svg>`;
  return new Resvg(svg, { font: { loadSystemFonts: true, defaultFontFamily: "DejaVu Sans" }, fitTo: { mode: "zoom", value: 1.5 } }).render().asPng();
}
