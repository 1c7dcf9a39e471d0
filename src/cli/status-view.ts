import { movedImageLine } from '../app/batch/image-pins.js';
import type { BatchStatus } from '../app/batch/status-shapes.js';
import { failedPairs } from '../core/batch-verdict.js';
import { EGRESS_LIVE_READ_BYTES } from '../core/egress/egress-live.js';
import type { EgressFacts } from '../core/egress/egress-tally.js';
import { formatDuration, formatTime } from '../core/report/format.js';
import { batchNextSteps, type HintContext } from '../core/next-steps.js';

/**
 * `e1-batch status`'s human view (the command, and its fast path in src/status-entry.ts, print the same). With `hint`
 * (the tool and the output folder as the user typed them), a batch that is not running says why and what to run next.
 */
export function renderStatus(s: BatchStatus, now: Date, hint?: HintContext): string {
  const c = s.counts;
  const done = c.completed + failedPairs(c);
  const lines = [
    `batch ${s.batch_id}  state ${s.state.toUpperCase()}${s.pause_reasons.length ? ` (paused: ${s.pause_reasons.join(', ')})` : ''}`,
    `progress ${done}/${c.total}  [${'#'.repeat(Math.round((done / Math.max(1, c.total)) * 30)).padEnd(30, '.')}]  workers allowed ${s.workers_allowed}${s.gpu_note ? ` (${s.gpu_note})` : s.gpu_peak_mib !== null ? ` (GPU peak ${s.gpu_peak_mib} MiB)` : ''}`,
    `pending ${c.pending}  claimed without result ${c.claimed} (running ${c.running})`,
    `completed ${c.completed}  infrastructure_failure ${c.infrastructure_failure}  fatal ${c.fatal}  provider_stop ${c.provider_stop}  harness_failure ${c.harness_failure}`,
  ];
  for (const p of s.pause_causes ?? [])
    lines.push(`  paused ${p.reason}${p.job_id ? ` (after ${p.job_id})` : ''}: ${p.code}: ${p.message}`);
  if (s.eta)
    lines.push(
      `ETA ${formatDuration(s.eta.remaining_sec)}  (mean pair ${formatDuration(s.eta.mean_pair_sec)} over ${s.eta.basis_pairs} finished)`,
    );
  for (const r of s.running) {
    const startMs = new Date(r.started_at).getTime();
    const elapsed = Math.max(0, Math.round((now.getTime() - startMs) / 1000));
    const budget = Math.round((new Date(r.deadline).getTime() - startMs) / 1000);
    const node = s.nodes !== undefined ? `  node ${r.node ?? '(not placed yet)'}` : '';
    lines.push(
      `  running ${r.job_id}  container ${r.container_id?.slice(0, 12) ?? '-'}${node}  elapsed ${elapsed}s / ${budget}s  (deadline ${formatTime(r.deadline)})`,
    );
  }
  for (const n of s.nodes ?? []) {
    lines.push(
      `  node ${n.node}: ${n.running.length} running${n.running.length ? ` (${n.running.join(', ')})` : ''}, GPUs ${n.gpus_in_use}/${n.gpus_total} in use`,
    );
  }
  lines.push(...failedLines(s), ...egressLines(s));
  for (const m of s.images_moved ?? []) lines.push(`warning: ${movedImageLine(m)}`);
  if (s.state === 'drained' && s.pause_reasons.length > 0) {
    lines.push(
      `note: every job has a result; the pause (${s.pause_reasons.join(', ')}) came from the last pairs and held nothing back (see the failed pairs above, and e1-batch report)`,
    );
  }
  if (s.claims_without_result.length && !s.supervisor?.alive)
    lines.push(`claims without result: ${s.claims_without_result.join(', ')}`);
  for (const l of s.leftovers)
    lines.push(
      `leftover container ${l.container_id.slice(0, 12)} (${l.status}) job ${l.job_id ?? '?'}: ${l.why}`,
    );
  lines.push(
    `supervisor ${s.supervisor ? `pid ${s.supervisor.pid} ${s.supervisor.alive ? 'alive' : 'not running'}` : 'never started'}`,
  );
  if (hint !== undefined) {
    const unfinished = c.total - c.completed - failedPairs(c);
    lines.push(...batchNextSteps({ ...s, unfinished }, hint));
  }
  return lines.join('\n');
}

/** The failed pairs by name, newest first, each with its first reason and the outcome's first broken rule. */
function failedLines(s: BatchStatus): string[] {
  const f = s.failed;
  if (f === undefined || f.pairs.length === 0) return [];
  const lines = f.pairs.flatMap((p) => [
    `  failed ${p.job_id}  ${p.classification}: ${p.reason ?? '?'}${p.problem !== null ? ` (${p.problem})` : ''}`,
    ...(p.why ?? []).map((line) => `      ${line}`),
  ]);
  if (f.more > 0)
    lines.push(
      `  … and ${f.more} more failed pair${f.more === 1 ? '' : 's'} (e1-batch report lists every one)`,
    );
  return lines;
}

/**
 * The allowlisted pairs' attempts (docs/spec.md §5.6): the batch's final counts over its finished pairs, then each
 * recent pair refused something; then the running pairs' figures so far, marked `running` (live, not final).
 */
function egressLines(s: BatchStatus): string[] {
  const e = s.egress;
  if (e === undefined) return [];
  const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;
  const pairLine = (p: EgressFacts & { job_id: string }, mark: string) =>
    `  egress ${p.job_id}${mark}  refused ${p.refused}  allowed ${p.allowed}${p.refused_hosts.length > 0 ? `  (${p.refused_hosts.join(', ')})` : ''}`;
  const lines =
    e.pairs > 0
      ? [
          `egress: ${plural(e.refused, 'refused attempt')}, ${e.allowed} allowed, over ${plural(e.pairs, 'allowlisted pair')}`,
          ...e.refused_pairs.map((p) => pairLine(p, '')),
        ]
      : [];
  if (e.more > 0)
    lines.push(
      `  … and ${plural(e.more, 'more pair')} with refused attempts (e1-batch report lists every one)`,
    );
  const r = e.running;
  if (r !== undefined) {
    const tail = `last ${EGRESS_LIVE_READ_BYTES / 1024} KiB`;
    lines.push(
      `egress (running, so far): ${plural(r.refused, 'refused attempt')}, ${r.allowed} allowed, over ${plural(r.pairs, 'running allowlisted pair')}${r.partial ? ` (of each file's ${tail} at most)` : ''}`,
      ...r.refused_pairs.map((p) => pairLine(p, p.partial ? ` (running, ${tail})` : ' (running)')),
    );
  }
  return lines;
}
