import { resolve } from 'node:path';
import { Flags } from '@oclif/core';
import { movedImageLine } from '../../app/batch/image-pins.js';
import type { BatchStatus } from '../../app/batch/status.js';
import { BaseCommand } from '../../cli/base-command.js';
import { batchOutputFlag } from '../../cli/flags.js';
import { createStatusReader } from '../../command-root.js';
import { batchFailed, failedPairs } from '../../core/batch-verdict.js';
import { ExitCode } from '../../core/errors.js';
import { formatDuration, formatTime } from '../../core/report/format.js';

function render(s: BatchStatus, now: Date): string {
  const c = s.counts;
  const done = c.completed + failedPairs(c);
  const lines = [
    `batch ${s.batch_id}  state ${s.state.toUpperCase()}${s.pause_reasons.length ? ` (paused: ${s.pause_reasons.join(', ')})` : ''}`,
    `progress ${done}/${c.total}  [${'#'.repeat(Math.round((done / Math.max(1, c.total)) * 30)).padEnd(30, '.')}]  workers allowed ${s.workers_allowed}${s.gpu_note ? ` (${s.gpu_note})` : s.gpu_peak_mib !== null ? ` (GPU peak ${s.gpu_peak_mib} MiB)` : ''}`,
    `pending ${c.pending}  claimed without result ${c.claimed} (running ${c.running})`,
    `completed ${c.completed}  infrastructure_failure ${c.infrastructure_failure}  fatal ${c.fatal}  provider_stop ${c.provider_stop}  harness_failure ${c.harness_failure}`,
  ];
  for (const p of s.pause_causes ?? []) lines.push(`  paused ${p.reason}${p.job_id ? ` (after ${p.job_id})` : ''}: ${p.code}: ${p.message}`);
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
  lines.push(...failedLines(s));
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
  return lines.join('\n');
}

/** The failed pairs by name, newest first, each with its first reason and the outcome's first broken rule. */
function failedLines(s: BatchStatus): string[] {
  const f = s.failed;
  if (f === undefined || f.pairs.length === 0) return [];
  const lines = f.pairs.map(
    (p) =>
      `  failed ${p.job_id}  ${p.classification}: ${p.reason ?? '?'}${p.problem !== null ? ` (${p.problem})` : ''}`,
  );
  if (f.more > 0)
    lines.push(
      `  … and ${f.more} more failed pair${f.more === 1 ? '' : 's'} (e1-batch report lists every one)`,
    );
  return lines;
}

function withoutElapsed(view: string): string {
  return view.replace(/elapsed \d+s/g, '').replace(/^ETA .*$/m, '');
}

export default class BatchStatusCommand extends BaseCommand {
  static override summary =
    'Show the derived state of a batch: counts, running and failed pairs (with their first reason), pause reasons, leftovers.';
  static override description =
    'Computed fresh from the journal, the job files and the engine (containers labelled with the batch id), reading only what changed: ' +
    "a live supervisor's status.json and the journal records after it, or else the journal folded once. " +
    'With --exit-status the exit code is 0 while running or drained cleanly, 4 when the batch finished with failures or is paused.';
  static override examples = [
    '<%= config.bin %> e1-batch status --output ./batch',
    '<%= config.bin %> e1-batch status --output ./batch --watch',
    '<%= config.bin %> e1-batch status --output ./batch --json',
  ];
  static override flags = {
    output: batchOutputFlag,
    watch: Flags.boolean({ description: 'refresh every second until the batch drains, stops or pauses', default: false }),
    'exit-status': Flags.boolean({ description: 'exit 4 when the batch is paused or finished with failures', default: false }),
  };

  async run(): Promise<BatchStatus> {
    const { flags } = await this.parse(BatchStatusCommand);
    const readStatus = await createStatusReader(resolve(flags.output));
    let status = await readStatus(new Date());
    if (flags.watch && !this.jsonEnabled()) {
      // On a terminal: redraw in place. Piped: print the view again only when it changed (no escape codes).
      let last = '';
      for (;;) {
        const view = render(status, new Date());
        if (process.stdout.isTTY) process.stdout.write(`\x1b[2J\x1b[H${view}\n`);
        else if (withoutElapsed(view) !== last) process.stdout.write(`${view}\n\n`);
        last = withoutElapsed(view);
        if (status.state !== 'running' && status.state !== 'stopping') break;
        await new Promise((r) => setTimeout(r, 1000));
        status = await readStatus(new Date());
      }
    } else {
      this.log(render(status, new Date()));
    }
    if (flags['exit-status'] && batchFailed(status)) process.exitCode = ExitCode.batchFailed;
    return status;
  }
}
