import { esc, formatDuration } from './format.js';
import type { ReportImagePlan } from './image-plan.js';

/** Bytes as MiB with one decimal (– when unknown). */
function mib(bytes: number | null): string {
  return bytes === null ? '–' : `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}

/**
 * The report's image plan section (issue 43): the budget and pace, one row per image (digest, sizes, pulls, evictions,
 * retries, failure, the pairs' waits for it) and the pairs that waited for their image. Text only, escaped. Pure.
 */
export function imagePlanHtml(plan: ReportImagePlan | null): string {
  if (plan === null) return '';
  const rows = plan.images
    .map(
      (i) =>
        `<tr data-image="${esc(i.image)}"><td><code>${esc(i.image)}</code></td><td><code>${esc(i.digest)}</code></td>` +
        `<td data-v="${i.compressed_bytes ?? ''}">${mib(i.compressed_bytes)}</td><td data-v="${i.store_bytes ?? ''}">${mib(i.store_bytes)}</td>` +
        `<td>${i.pulls}</td><td>${i.evictions}</td><td>${i.retries}</td><td>${i.waits}</td>` +
        `<td data-v="${i.waited_ms}">${formatDuration(i.waited_ms / 1000)}</td>` +
        `<td>${i.failure === null ? '' : `${esc(i.failure.kind)}: ${esc(i.failure.message)}`}</td></tr>`,
    )
    .join('\n');
  const waits = Object.entries(plan.pair_waits)
    .sort(([, a], [, b]) => b - a)
    .map(
      ([job, ms]) => `<li data-job="${esc(job)}"><code>${esc(job)}</code> ${formatDuration(ms / 1000)}</li>`,
    )
    .join('');
  const facts =
    `budget ${mib(plan.budget_bytes)} (${esc(plan.budget_basis)}), ${plan.concurrency} pull(s) at once` +
    (plan.prune_own_images ? ', the user’s own images may be removed (--prune-own-images)' : '');
  return `<h2>Images: the plan frozen at start</h2><div class="card" id="image-plan"><p class="note">${facts}</p>
<table id="images"><thead><tr><th>image</th><th>digest frozen at start</th><th>compressed</th><th>in the store</th><th>pulled</th><th>evicted</th><th>retries</th><th>waits</th><th>waited</th><th>failure</th></tr></thead>
<tbody>
${rows}
</tbody></table>
<p class="note">Pairs that waited for their image: ${waits === '' ? 'none' : String(Object.keys(plan.pair_waits).length)}</p>${waits === '' ? '' : `<ol id="image-waits">${waits}</ol>`}</div>`;
}
