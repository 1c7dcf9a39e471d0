import { esc, formatDuration, formatTime, num } from './format.js';
import type { ReportModel, ReportPair } from './types.js';

/** The report's two charts as inline SVG (no script, no external resource). Pure. */

const WIDTH = 1200;
const LEFT = 84;
const RIGHT = 16;
const ROW = 30;
const MARK_BAND = 26;
const AXIS = 26;

/** The CSS class of a pair: its classification, or its state while it has none. */
export function pairKind(p: ReportPair): string {
  return p.classification ?? p.status;
}

function niceStep(spanSec: number, ticks: number): number {
  const steps = [
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10_800, 21_600, 43_200, 86_400, 172_800,
    604_800,
  ];
  const raw = spanSec / ticks;
  return steps.find((s) => s >= raw) ?? steps.at(-1)!;
}

function tickLabel(sec: number, step: number): string {
  if (step < 60) return `+${sec}s`;
  if (step < 3600) return `+${Math.round(sec / 60)}m`;
  if (step < 86_400) return `+${num(sec / 3600)}h`;
  return `+${num(sec / 86_400)}d`;
}

/** Where the timeline draws: x of a time, the plot's width, its slots and where their rows end. */
interface TimelineScale {
  readonly t0: number;
  readonly t1: number;
  readonly plotW: number;
  readonly slots: number;
  readonly rowsBottom: number;
  x(iso: string): number;
}

function timelineScale(m: ReportModel): TimelineScale {
  const t0 = new Date(m.timeline.start).getTime();
  const t1 = Math.max(new Date(m.timeline.end).getTime(), t0 + 1000);
  const plotW = WIDTH - LEFT - RIGHT;
  const slots = m.timeline.slots;
  return {
    t0,
    t1,
    plotW,
    slots,
    rowsBottom: MARK_BAND + slots * ROW,
    x: (iso) => LEFT + ((new Date(iso).getTime() - t0) / (t1 - t0)) * plotW,
  };
}

function lanes(sc: TimelineScale): string[] {
  const out: string[] = [];
  for (let s = 0; s < sc.slots; s++) {
    const y = MARK_BAND + s * ROW;
    out.push(
      `<rect class="lane" x="${LEFT}" y="${y}" width="${sc.plotW}" height="${ROW}"/><text class="lbl" x="${LEFT - 8}" y="${y + ROW / 2 + 4}" text-anchor="end">worker ${s + 1}</text>`,
    );
  }
  return out;
}

function pauseRects(m: ReportModel, sc: TimelineScale): string[] {
  return m.timeline.pauses.map((p) => {
    const a = sc.x(p.from);
    const b = p.to === null ? WIDTH - RIGHT : sc.x(p.to);
    const title = `paused ${formatTime(p.from)} → ${p.to === null ? 'still paused' : formatTime(p.to)}: ${p.reasons.join(', ')}${p.job_id ? ` (after ${p.job_id})` : ''}`;
    return `<rect class="pause" x="${num(a)}" y="${MARK_BAND}" width="${num(Math.max(2, b - a))}" height="${sc.slots * ROW}"><title>${esc(title)}</title></rect>`;
  });
}

function pairBars(m: ReportModel, sc: TimelineScale): string[] {
  const out: string[] = [];
  const labels = m.pairs.length <= 200;
  const tooltips = m.pairs.length <= 2_000;
  for (const p of m.pairs) {
    if (p.slot === null || p.started_at === null) continue;
    const a = sc.x(p.started_at);
    const b = p.finished_at === null ? sc.x(m.timeline.end) : sc.x(p.finished_at);
    const w = Math.max(1, b - a);
    const y = MARK_BAND + p.slot * ROW + 4;
    const title = `${p.job_id}: ${pairKind(p)}${p.reasons.length ? ` (${p.reasons.join(', ')})` : ''}, ${formatDuration(p.duration_sec)}`;
    const attrs = `class="pair k-${pairKind(p)}" data-job="${esc(p.job_id)}" x="${num(a)}" y="${y}" width="${num(w)}" height="${ROW - 8}"`;
    // Past a few thousand pairs a bar is under a pixel wide: a tooltip helps no one, the table has the details.
    out.push(tooltips ? `<rect ${attrs}><title>${esc(title)}</title></rect>` : `<rect ${attrs}/>`);
    if (labels && w > p.job_id.length * 7 + 6)
      out.push(`<text class="plbl" x="${num(a + 4)}" y="${y + ROW / 2}">${esc(p.job_id)}</text>`);
  }
  return out;
}

function markerGlyphs(m: ReportModel, sc: TimelineScale): string[] {
  return m.timeline.markers.map((mk) => {
    const mx = num(sc.x(mk.at));
    const cls =
      mk.kind === 'source_check'
        ? `mk-source${mk.ok === false ? ' bad' : ''}`
        : `mk-${mk.kind.replace('_', '-')}`;
    const sym =
      mk.kind === 'source_check'
        ? `<path d="M${mx} 4 l6 7 l-6 7 l-6 -7 z"/>`
        : mk.kind === 'second_worker'
          ? `<path d="M${mx} 4 l7 14 h-14 z"/>`
          : mk.kind === 'stop_requested'
            ? `<rect x="${num(sc.x(mk.at) - 5)}" y="6" width="10" height="10"/>` // a square: never read as a supervisor start
            : `<circle cx="${mx}" cy="11" r="5"/>`;
    return `<g class="mk ${cls}" data-kind="${mk.kind}"><title>${esc(`${mk.label} at ${formatTime(mk.at)}`)}</title>${sym}<line x1="${mx}" y1="18" x2="${mx}" y2="${sc.rowsBottom}"/></g>`;
  });
}

function axisTicks(sc: TimelineScale): string[] {
  const out: string[] = [];
  const spanSec = (sc.t1 - sc.t0) / 1000;
  const step = niceStep(spanSec, 10);
  for (let sec = 0; sec <= spanSec; sec += step) {
    const tx = num(LEFT + (sec / spanSec) * sc.plotW);
    out.push(
      `<line class="tick" x1="${tx}" y1="${sc.rowsBottom}" x2="${tx}" y2="${sc.rowsBottom + 5}"/><text class="lbl" x="${tx}" y="${sc.rowsBottom + 18}" text-anchor="middle">${tickLabel(sec, step)}</text>`,
    );
  }
  return out;
}

export function timelineSvg(m: ReportModel): string {
  const sc = timelineScale(m);
  const height = sc.rowsBottom + AXIS;
  return [
    `<svg id="timeline" viewBox="0 0 ${WIDTH} ${height}" width="100%" role="img" aria-label="timeline of pairs by worker slot">`,
    ...lanes(sc),
    ...pauseRects(m, sc),
    ...pairBars(m, sc),
    ...markerGlyphs(m, sc),
    ...axisTicks(sc),
    '</svg>',
  ].join('');
}

const GPU_H = 220;
const GPU_TOP = 14;
const GPU_BOTTOM = 24;

/** Measured peaks per pair against the budget rule: bars, and the limit a second worker needs. */
export function gpuSvg(m: ReportModel): string {
  const measured = m.pairs.filter((p) => p.gpu_peak_mib !== null);
  if (measured.length === 0) return '';
  const rule = m.gpu.rule;
  const limit = rule?.two_worker_peak_limit_mib ?? null;
  const oneWorker = rule ? rule.fraction * rule.total_mib - rule.baseline_mib : null;
  const top =
    measured.reduce((a, p) => Math.max(a, p.gpu_peak_mib!), Math.max(limit ?? 0, oneWorker ?? 0)) * 1.08 || 1;
  const plotW = WIDTH - LEFT - RIGHT;
  const plotH = GPU_H - GPU_TOP - GPU_BOTTOM;
  const y = (mib: number): number => GPU_TOP + plotH - (mib / top) * plotH;
  const slot = plotW / measured.length;
  const barW = Math.max(0.5, Math.min(40, slot * 0.7));
  const out: string[] = [
    `<svg id="gpu" viewBox="0 0 ${WIDTH} ${GPU_H}" width="100%" role="img" aria-label="GPU peaks per pair">`,
  ];
  out.push(
    `<line class="axis" x1="${LEFT}" y1="${GPU_TOP + plotH}" x2="${WIDTH - RIGHT}" y2="${GPU_TOP + plotH}"/>`,
  );
  out.push(
    `<text class="lbl" x="${LEFT - 8}" y="${GPU_TOP + plotH}" text-anchor="end">0</text><text class="lbl" x="${LEFT - 8}" y="${GPU_TOP + 10}" text-anchor="end">${Math.round(top)} MiB</text>`,
  );
  const individual = measured.length <= 500;
  const paths: Record<string, string[]> = { fits: [], over: [] };
  measured.forEach((p, i) => {
    const peak = p.gpu_peak_mib!;
    const fit = limit === null || peak <= limit ? 'fits' : 'over';
    const bx = LEFT + i * slot + (slot - barW) / 2;
    if (individual) {
      if (measured.length <= 40)
        out.push(
          `<text class="lbl" x="${num(bx + barW / 2)}" y="${GPU_TOP + plotH + 14}" text-anchor="middle">${esc(p.job_id)}</text>`,
        );
      out.push(
        `<rect class="gbar ${fit}" data-job="${esc(p.job_id)}" x="${num(bx)}" y="${num(y(peak))}" width="${num(barW)}" height="${num(GPU_TOP + plotH - y(peak))}"><title>${esc(`${p.job_id}: peak ${peak} MiB`)}</title></rect>`,
      );
    } else {
      paths[fit]!.push(`M${num(bx + barW / 2)} ${GPU_TOP + plotH}V${num(y(peak))}`);
    }
  });
  for (const [fit, d] of Object.entries(paths))
    if (d.length) out.push(`<path class="gpath ${fit}" stroke-width="${num(barW)}" d="${d.join('')}"/>`);
  if (limit !== null) {
    out.push(
      `<line class="limit" x1="${LEFT}" y1="${num(y(limit))}" x2="${WIDTH - RIGHT}" y2="${num(y(limit))}"/><text class="lbl lim" x="${WIDTH - RIGHT}" y="${num(y(limit) - 4)}" text-anchor="end">two workers while the largest peak ≤ ${limit} MiB</text>`,
    );
  }
  if (oneWorker !== null) {
    out.push(
      `<line class="budget" x1="${LEFT}" y1="${num(y(oneWorker))}" x2="${WIDTH - RIGHT}" y2="${num(y(oneWorker))}"/><text class="lbl" x="${WIDTH - RIGHT}" y="${num(y(oneWorker) - 4)}" text-anchor="end">budget ${rule!.fraction} × ${rule!.total_mib} − ${rule!.baseline_mib} = ${num(oneWorker)} MiB</text>`,
    );
  }
  out.push('</svg>');
  return out.join('');
}
