import { esc, formatDuration } from './format.js';
import type { ReportImagePlan } from './image-plan.js';
import type { ReportImageNode } from './image-plan-nodes.js';

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
        `<td>${i.failure === null ? '' : `${esc(i.failure.kind)}: ${esc(i.failure.message)}`}</td>` +
        (i.pulled_on !== undefined ? `<td class="on">${codes(i.pulled_on)}</td>` : '') +
        '</tr>',
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
<table id="images"><thead><tr><th>image</th><th>digest frozen at start</th><th>compressed</th><th>in the store</th><th>pulled</th><th>evicted</th><th>retries</th><th>waits</th><th>waited</th><th>failure</th>${plan.nodes !== undefined ? '<th>pulled on</th>' : ''}</tr></thead>
<tbody>
${rows}
</tbody></table>${plan.nodes !== undefined ? nodesHtml(plan.nodes) : ''}
<p class="note">Pairs that waited for their image: ${waits === '' ? 'none' : String(Object.keys(plan.pair_waits).length)}</p>${waits === '' ? '' : `<ol id="image-waits">${waits}</ol>`}</div>`;
}

/** Strings as escaped `<code>` items, space-separated. */
function codes(values: readonly string[]): string {
  return values.map((v) => `<code>${esc(v)}</code>`).join(' ');
}

/** Swarm: one row per node, what its own puller did on its engine (issue 43, item 6). */
function nodesHtml(nodes: readonly ReportImageNode[]): string {
  const rows = nodes
    .map(
      (n) =>
        `<tr data-node="${esc(n.node)}"><td><code>${esc(n.node)}</code></td>` +
        `<td>${n.pulls}</td><td>${n.evictions}</td><td>${n.retries}</td><td>${n.waits}</td>` +
        `<td data-v="${n.waited_ms}">${formatDuration(n.waited_ms / 1000)}</td>` +
        `<td data-v="${n.held_bytes}">${mib(n.held_bytes)}</td><td class="held">${codes(n.held)}</td>` +
        `<td class="pulled">${codes(n.pulled)}</td><td class="evicted">${codes(n.evicted)}</td>` +
        `<td class="failed">${codes(n.failed)}</td></tr>`,
    )
    .join('\n');
  return `
<p class="note">Per node: each node pulls for its own pairs on its own engine, within its own budget; held at the end by the journal.</p>
<table id="image-nodes"><thead><tr><th>node</th><th>pulled</th><th>evicted</th><th>retries</th><th>waits</th><th>waited</th><th>held at the end</th><th>images held at the end</th><th>images pulled</th><th>images evicted</th><th>pull failed</th></tr></thead>
<tbody>
${rows}
</tbody></table>`;
}
