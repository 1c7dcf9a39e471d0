import { resolve } from 'node:path';
import * as Flags from '@oclif/core/flags';
import type { ReconcileBatchResult, ReconcileMode, ReconcileReport } from '../app/pair/reconcile-pair.js';
import { reconcileOutput } from '../app/pair/reconcile-output.js';
import { BaseCommand } from '../cli/base-command.js';
import { previewExecuteFlags } from '../cli/flags.js';
import { createReconcileDeps } from '../command-root.js';
import { ExitCode } from '../core/errors.js';

export interface ReconcileJson extends ReconcileBatchResult {
  readonly output: string;
  readonly registry: string;
  readonly mode: ReconcileMode;
}

const OK_KINDS: ReadonlySet<ReconcileReport['kind']> = new Set([
  'would_commit',
  'committed',
  'already_committed',
]);

export function renderReport(r: ReconcileReport): string[] {
  const head = OK_KINDS.has(r.kind) ? r.kind : `${r.kind.toUpperCase()} (${r.reason ?? '?'})`;
  return [`${r.job_id}: ${head}: ${r.detail}`, ...r.steps.map((s) => `  - ${s}`)];
}

export default class Reconcile extends BaseCommand {
  static override summary =
    'Terminal reconciliation: prove each finished pair, mark it terminal on the board, release its reservation.';
  static override description = [
    'Builds a terminal proof of each finished pair from its retained evidence (receipt, result.json, the outcome',
    'file, the container verified gone), writes it to terminal-proof.json, then in one registry transaction marks',
    'the board row terminal and releases the reservation, reading both back. --preview shows the plan and writes',
    'nothing. --execute is idempotent: a replay changes nothing. Missing or contradictory evidence, a changed',
    'outcome, a container still present, a run id owned by another batch or a stale admission keep the reservation.',
    '',
    'Exit codes: 0 every pair committed, already committed or (preview) would commit; 1 any hold or refusal;',
    '2 bad usage (no such output directory, job or registry).',
  ].join('\n');
  static override examples = [
    '<%= config.bin %> reconcile --output ./batch-1 --preview',
    '<%= config.bin %> reconcile --output ./batch-1 --job pair-0001 --execute --json',
  ];
  static override flags = {
    output: Flags.string({
      description: 'batch output directory D (or a `pair run` directory)',
      required: true,
    }),
    job: Flags.string({ description: 'reconcile only this job id' }),
    ...previewExecuteFlags({
      preview: 'show the plan; change nothing',
      execute: 'write the proof, mark the board terminal, release',
    }),
    registry: Flags.string({
      description:
        'host registry (default: the one the evidence records, batch.json or the pair run receipt; else $XDG_STATE_HOME/roboguide-eval/registry.db); another one than recorded is refused',
    }),
  };

  async run(): Promise<ReconcileJson> {
    const { flags } = await this.parse(Reconcile);
    const mode: ReconcileMode = flags.execute ? 'execute' : 'preview';
    const output = resolve(flags.output);
    const { registryPath, ...result } = await reconcileOutput(createReconcileDeps(flags.registry), {
      output,
      mode,
      ...(flags.job !== undefined ? { jobId: flags.job } : {}),
    });
    for (const report of result.reports) for (const line of renderReport(report)) this.log(line);
    for (const s of result.skipped) this.log(`${s.job_id}: skipped: ${s.why}`);
    if (result.reports.length === 0) this.log('nothing to reconcile: no claimed job has a result.json');
    if (result.reports.some((r) => !OK_KINDS.has(r.kind))) process.exitCode = ExitCode.runtime;
    return { output, registry: registryPath, mode, ...result };
  }
}
