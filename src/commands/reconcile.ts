import { existsSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { Flags } from '@oclif/core';
import { NodeFileSystem } from '../adapters/fs/node-file-system.js';
import { EvidenceStore } from '../app/evidence/evidence-store.js';
import { isPostgresLocation, registryLocation } from '../adapters/registry/default-path.js';
import { checkRegistryLocation, openRegistryAt } from '../adapters/registry/open-registry.js';
import { reconcileBatch, type ReconcileBatchResult, type ReconcileMode, type ReconcileReport } from '../app/reconcile-pair.js';
import { BaseCommand } from '../cli/base-command.js';
import { outcomeReader, runtimeForOutput } from '../composition-root.js';
import { ExitCode, RoboguideError } from '../core/errors.js';

export interface ReconcileJson extends ReconcileBatchResult {
  readonly output: string;
  readonly registry: string;
  readonly mode: ReconcileMode;
}

const OK_KINDS: ReadonlySet<ReconcileReport['kind']> = new Set(['would_commit', 'committed', 'already_committed']);

function usage(message: string, suggestion: string): RoboguideError {
  return new RoboguideError('E_USAGE', message, { exitCode: ExitCode.invalidInput, suggestions: [suggestion] });
}

export function renderReport(r: ReconcileReport): string[] {
  const head = OK_KINDS.has(r.kind) ? r.kind : `${r.kind.toUpperCase()} (${r.reason ?? '?'})`;
  return [`${r.job_id}: ${head}: ${r.detail}`, ...r.steps.map((s) => `  - ${s}`)];
}

export default class Reconcile extends BaseCommand {
  static override summary = 'Terminal reconciliation: prove each finished pair, mark it terminal on the board, release its reservation.';
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
    output: Flags.string({ description: 'batch output directory D (or a `pair run` directory)', required: true }),
    job: Flags.string({ description: 'reconcile only this job id' }),
    preview: Flags.boolean({ description: 'show the plan; change nothing', exactlyOne: ['preview', 'execute'] }),
    execute: Flags.boolean({ description: 'write the proof, mark the board terminal, release', exactlyOne: ['preview', 'execute'] }),
    registry: Flags.string({ description: 'host registry database (default: $XDG_STATE_HOME/roboguide-eval/registry.db)' }),
  };

  async run(): Promise<ReconcileJson> {
    const { flags } = await this.parse(Reconcile);
    const mode: ReconcileMode = flags.execute ? 'execute' : 'preview';
    const output = resolve(flags.output);
    if (!existsSync(output) || !statSync(output).isDirectory()) {
      throw usage(`output directory ${output} does not exist`, 'pass the --output directory of a batch or a pair run');
    }
    const location = registryLocation(flags.registry);
    const registryPath = location.path;
    if (!isPostgresLocation(location) && !existsSync(registryPath)) {
      throw usage(`no capacity registry at ${registryPath}`, 'pass --registry with the database the batch was admitted in');
    }
    checkRegistryLocation(location); // an existing file that is no registry is refused, never migrated
    const registry = await openRegistryAt(location);
    let result: ReconcileBatchResult;
    try {
      const deps = { store: new EvidenceStore(new NodeFileSystem(), output), registry, runtime: await runtimeForOutput(output), readOutcomeSha256: (path: string) => outcomeReader.sha256(path) };
      result = await reconcileBatch(deps, { mode, ...(flags.job !== undefined ? { jobId: flags.job } : {}) });
    } finally {
      await registry.close();
    }
    for (const report of result.reports) for (const line of renderReport(report)) this.log(line);
    for (const s of result.skipped) this.log(`${s.job_id}: skipped: ${s.why}`);
    if (result.reports.length === 0) this.log('nothing to reconcile: no claimed job has a result.json');
    if (result.reports.some((r) => !OK_KINDS.has(r.kind))) process.exitCode = ExitCode.runtime;
    return { output, registry: registryPath, mode, ...result };
  }
}
