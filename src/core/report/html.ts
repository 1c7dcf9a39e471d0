import { CLASSIFICATIONS } from '../result.js';
import { esc, formatDuration, formatTime } from './format.js';
import type { ReportModel, ReportPair } from './types.js';
import { gpuSvg, pairKind, timelineSvg } from './svg.js';
import { imagePlanHtml } from './image-plan-html.js';

/**
 * report.html: one self-contained page (inline CSS, inline SVG, a few lines of inline script to sort and filter
 * the table). A Content-Security-Policy forbids every fetch, so the page works offline and copied anywhere.
 * Links are relative to the batch directory (`linkBase` when the page is written elsewhere). Pure.
 */

/** The colour of each classification and pair state: the timeline, the table and the legend use these. */
export const KIND_COLOURS: Readonly<Record<string, string>> = {
  completed: '#2e7d32',
  infrastructure_failure: '#ef6c00',
  fatal: '#c62828',
  provider_stop: '#6a1b9a',
  harness_failure: '#6d4c41',
  running: '#1e88e5',
  unfinished: '#90a4ae',
  pending: '#e0e0e0',
};

const CSS = `
:root{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#1b1f24;background:#f6f7f9}
body{margin:0 auto;max-width:1280px;padding:16px 24px 48px}
h1{font-size:20px;margin:0 0 4px;display:inline-block}h2{font-size:15px;margin:28px 0 8px;text-transform:uppercase;letter-spacing:.04em;color:#4a5361}
code{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:.95em}
.card{background:#fff;border:1px solid #dde1e6;border-radius:8px;padding:12px 16px}
.state{display:inline-block;padding:2px 10px;border-radius:12px;font-weight:600;font-size:13px;color:#fff;vertical-align:middle;margin-left:8px}
.st-running,.st-stopping{background:#1e88e5}.st-drained{background:#2e7d32}.st-paused{background:#c62828}.st-stopped{background:#616161}
.facts{display:grid;grid-template-columns:repeat(auto-fit,minmax(190px,1fr));gap:8px 20px;margin:12px 0 0}
.facts div{font-size:13px;color:#4a5361}.facts b{display:block;font-size:17px;color:#1b1f24;font-weight:600;white-space:nowrap}.facts b.t{font-size:14px}.facts small{display:block;font-size:11px}
.chips{display:flex;flex-wrap:wrap;gap:8px;margin-top:12px}
.chip{display:flex;align-items:center;gap:6px;border:1px solid #dde1e6;border-radius:14px;padding:3px 10px;font-size:13px;background:#fff}
.sw{display:inline-block;width:12px;height:12px;border-radius:3px}
.pausebox{margin-top:12px;font-size:13px}.pausebox .now{color:#c62828;font-weight:600}
.pausebox ol{margin:4px 0 0 18px;padding:0}
svg text{font-size:11px;fill:#4a5361}svg .plbl{fill:#fff;font-size:10px;dominant-baseline:middle;pointer-events:none}
.lane{fill:#f1f3f5;stroke:#fff;stroke-width:2}
.pair{stroke:#fff;stroke-width:.5}.pair:hover{stroke:#000;stroke-width:1.5}
.pause{fill:#c62828;fill-opacity:.13;stroke:#c62828;stroke-opacity:.5;stroke-dasharray:4 3}
.mk line{stroke-width:1.2;stroke-dasharray:3 3}.mk-source path{fill:#00897b}.mk-source line{stroke:#00897b}
.mk-source.bad path{fill:#c62828}.mk-source.bad line{stroke:#c62828}
.mk-second-worker path{fill:#f9a825}.mk-second-worker line{stroke:#f9a825;stroke-dasharray:none;stroke-width:2}
.mk-supervisor-started circle{fill:#455a64}.mk-supervisor-started line,.mk-supervisor-exited line{stroke:#455a64}
.mk-supervisor-exited circle{fill:#fff;stroke:#455a64;stroke-width:2}
.problems{margin:2px 0 0;padding-left:16px;font-size:12px;color:#c62828}.mk-stop-requested rect{fill:#616161}.mk-stop-requested line{stroke:#616161;stroke-dasharray:3 2}.timed-out{font-size:11px;padding:0 4px;border-radius:3px;background:#fdecea;color:#c62828}
.tick,.axis{stroke:#9aa3ad}
.gbar.fits,.gpath.fits{fill:#1e88e5;stroke:#1e88e5}.gbar.over,.gpath.over{fill:#ef6c00;stroke:#ef6c00}.gpath{fill:none}
.limit{stroke:#f9a825;stroke-width:2;stroke-dasharray:6 4}.budget{stroke:#c62828;stroke-width:1.5}.lim{fill:#9a6b00}
.legend{display:flex;flex-wrap:wrap;gap:14px;font-size:12px;color:#4a5361;margin-top:6px}
.legend span{display:inline-flex;align-items:center;gap:5px}
table{border-collapse:collapse;width:100%;font-size:13px;background:#fff}
th,td{padding:5px 8px;border-bottom:1px solid #eceff2;text-align:left;vertical-align:top}
th{position:sticky;top:0;background:#eef1f4;cursor:pointer;user-select:none;white-space:nowrap}
th[aria-sort=ascending]::after{content:" ▲"}th[aria-sort=descending]::after{content:" ▼"}
#pairs td:nth-child(4),#pairs td:nth-child(5){text-align:right;font-variant-numeric:tabular-nums}#pairs td:nth-child(-n+2){white-space:nowrap}
tbody tr{border-left:5px solid transparent}tbody tr:hover{background:#f6f8fa}
td a{margin-right:8px}#pairs td:nth-child(2){font-weight:600}
.filter{margin:0 0 8px;padding:5px 8px;width:280px;border:1px solid #c7cdd4;border-radius:6px}
.note{font-size:12px;color:#4a5361}
`;

function kindCss(): string {
  return Object.entries(KIND_COLOURS)
    .map(
      ([k, c]) =>
        `.k-${k}{fill:${c}}tr.k-${k}{border-left-color:${c}}tr.k-${k} td:nth-child(2){color:${k === 'pending' ? '#777' : c}}.sw.k-${k}{background:${c}}`,
    )
    .join('');
}

const SCRIPT = `
(()=>{const t=document.getElementById('pairs');if(!t)return;const b=t.tBodies[0];
t.tHead.addEventListener('click',e=>{const th=e.target.closest('th');if(!th)return;const i=th.cellIndex,n=th.dataset.sort==='num';
const dir=th.getAttribute('aria-sort')==='ascending'?-1:1;for(const h of t.tHead.rows[0].cells)h.removeAttribute('aria-sort');
th.setAttribute('aria-sort',dir===1?'ascending':'descending');const v=r=>{const c=r.cells[i];const d=c.dataset.v;const s=d??c.textContent;return n?(s===''?-Infinity:+s):s};
const rows=[...b.rows].sort((x,y)=>{const a=v(x),c=v(y);return (a<c?-1:a>c?1:0)*dir});b.append(...rows)});
const f=document.getElementById('filter');f&&f.addEventListener('input',()=>{const q=f.value.toLowerCase();for(const r of b.rows)r.hidden=q!==''&&!r.textContent.toLowerCase().includes(q)})})();
`;

function header(m: ReportModel): string {
  const c = m.counts;
  const done = c.total - c.pending - c.claimed;
  const facts: [string, string][] = [
    ['progress', `${done} / ${c.total}`],
    ['elapsed', formatDuration(m.elapsed_sec)],
    ['ETA', m.eta ? formatDuration(m.eta.remaining_sec) : '–'],
    ['workers allowed', String(m.workers_allowed)],
    ['running', String(c.running)],
    ['pending', String(c.pending)],
    ['created', formatTime(m.created_at)],
    ['report generated', formatTime(m.generated_at)],
  ];
  const chips = CLASSIFICATIONS.map(
    (k) =>
      `<span class="chip" data-kind="${k}"><span class="sw k-${k}"></span>${k.replace('_', ' ')} <b>${c[k]}</b></span>`,
  ).join('');
  const history = m.pause_history
    .map(
      (h) =>
        `<li>${formatTime(h.at)} — ${h.event === 'paused' ? 'paused' : 'resumed, cleared'}: ${esc(h.reasons.join(', ') || 'nothing')}${h.job_id ? ` (after ${esc(h.job_id)})` : ''}${h.cause ? ` — <span class="cause">${esc(h.cause.code)}: ${esc(h.cause.message)}</span>` : ''}</li>`,
    )
    .join('');
  const pauseNow = m.pause_reasons.length
    ? `<span class="now">paused now: ${esc(m.pause_reasons.join(', '))}</span>`
    : 'not paused now';
  const timeFacts = new Set(['created', 'report generated']);
  return `<header class="card"><h1>Batch <code>${esc(m.batch_id)}</code></h1><span class="state st-${m.state}" id="state">${m.state.toUpperCase()}</span>
<div class="facts">${facts.map(([k, v]) => `<div>${k}<b${timeFacts.has(k) ? ' class="t"' : ''}>${esc(v)}</b>${k === 'ETA' && m.eta ? `<small>mean pair ${esc(formatDuration(m.eta.mean_pair_sec))} over ${m.eta.basis_pairs} finished</small>` : ''}</div>`).join('')}</div>
<div class="chips">${chips}</div>
<div class="pausebox" id="pauses">${pauseNow}${history ? `<ol>${history}</ol>` : ''}</div>${movedBox(m)}</header>`;
}

/** Pinned tags that moved since start (said, never followed). */
function movedBox(m: ReportModel): string {
  if (m.images_moved.length === 0) return '';
  return `<div class="pausebox" id="images-moved">${m.images_moved.map((l) => `<span class="now">warning: ${esc(l)}</span>`).join('<br>')}</div>`;
}

function legend(): string {
  const kinds = Object.keys(KIND_COLOURS).filter((k) => k !== 'pending');
  const marks = [
    ['#00897b', 'source check'],
    ['#f9a825', 'second worker admitted'],
    ['#455a64', 'supervisor start (first start or resume; filled) / exit (hollow)'],
    ['#616161', 'stop requested (e1-batch stop; square, dashed line)'],
    ['rgba(198,40,40,.25)', 'paused'],
  ];
  return `<div class="legend">${kinds.map((k) => `<span><span class="sw k-${k}"></span>${k.replace('_', ' ')}</span>`).join('')}${marks
    .map(([c, l]) => `<span><span class="sw" style="background:${c}"></span>${l}</span>`)
    .join('')}</div>`;
}

/** The outcome's broken rules under the reasons (result.json `outcome_problems`): the fix is named where it shows. */
function problemsCell(p: ReportPair): string {
  const why = p.why ?? []; // absent from report data written before issue 40
  if (p.outcome_problems.length === 0 && why.length === 0) return '';
  const items = [
    ...p.outcome_problems.map((t) => `<li>${esc(t)}</li>`),
    ...why.map((t) => `<li class="why">${esc(t)}</li>`),
  ];
  return `<ul class="problems">${items.join('')}</ul>`;
}

/** An allowlisted pair's attempts: allowed and refused, and the hosts it was refused (masked in result.json). */
function egressCell(p: ReportPair): string {
  const e = p.egress;
  if (e === undefined) return '<td data-v=""></td>';
  const hosts = e.refused_hosts.length
    ? `<ul class="problems egress-refused">${e.refused_hosts.map((h) => `<li>${esc(h)}</li>`).join('')}</ul>`
    : '';
  return `<td class="egress" data-v="${e.refused}">allowed ${e.allowed} / refused ${e.refused}${hosts}</td>`;
}

function row(p: ReportPair, base: string): string {
  const kind = pairKind(p);
  const href = (rel: string | undefined, label: string): string =>
    rel ? `<a href="${esc(base + rel)}">${label}</a>` : '';
  const provider = p.provider_failure_kind
    ? `${esc(p.provider_failure_kind)}${p.provider_http_status === null ? '' : ` (${p.provider_http_status})`}`
    : p.provider_failure_error_kind
      ? `diagnosis failed: ${esc(p.provider_failure_error_kind)}`
      : '';
  const cleanup = p.cleanup_verified === null ? '' : p.cleanup_verified ? 'verified' : '<b>NOT verified</b>';
  const exit = p.exit_code === null ? '' : String(p.exit_code);
  return (
    `<tr class="k-${kind}" data-job="${esc(p.job_id)}"><td>${esc(p.job_id)}</td><td>${kind}</td><td>${esc(p.reasons.join(', '))}${problemsCell(p)}</td>` +
    `<td data-v="${p.duration_sec ?? ''}">${formatDuration(p.duration_sec)}${p.timed_out ? ' <span class="timed-out">timed out</span>' : ''}</td><td>${exit}</td>` +
    `<td>${provider}</td>${egressCell(p)}<td>${cleanup}</td><td>${href(p.links.stdout, 'stdout')}${href(p.links.stderr, 'stderr')}${href(p.links.result, 'result')}${href(p.links.outcome, 'outcome')}</td></tr>`
  );
}

export interface RenderOptions {
  /** Prefix of every evidence link ('' when the page lies in the batch directory). */
  readonly linkBase?: string;
}

export function renderReportHtml(m: ReportModel, options: RenderOptions = {}): string {
  const base = options.linkBase ?? '';
  const live = m.state === 'running' || m.state === 'stopping';
  const gpu = gpuSvg(m);
  const rows = m.pairs.map((p) => row(p, base)).join('\n');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width,initial-scale=1">${live ? '\n<meta http-equiv="refresh" content="5">' : ''}
<title>${esc(m.batch_id)} — ${m.state}</title><style>${CSS}${kindCss()}</style></head><body>
${header(m)}
<h2>Timeline</h2><div class="card">${timelineSvg(m)}${legend()}</div>
<h2>GPU: measured peaks against the budget rule</h2><div class="card"><p class="note" id="gpu-note">${esc(m.gpu.note)}</p>${gpu || '<p class="note">no pair reported a measured GPU peak</p>'}</div>
<h2>Pairs</h2><div class="card"><input id="filter" class="filter" placeholder="filter pairs…" aria-label="filter pairs">
<table id="pairs"><thead><tr><th data-sort="text">pair</th><th data-sort="text">classification</th><th data-sort="text">reasons</th><th data-sort="num">duration</th><th data-sort="num">exit</th><th data-sort="text">provider failure</th><th data-sort="num">egress</th><th data-sort="text">cleanup</th><th data-sort="text">evidence</th></tr></thead>
<tbody>
${rows}
</tbody></table></div>
${imagePlanHtml(m.image_plan)}
<p class="note">Built from the batch's redacted evidence only (events.jsonl, receipts, results). Links are relative to the batch directory.</p>
<script>${SCRIPT}</script>
</body></html>
`;
}
