import { resolve } from 'node:path';
import * as Flags from '@oclif/core/flags';
import { recoverOutput } from '../../app/pair/recover-output.js';
import type { RecoverPairRunReport } from '../../app/pair/recover-pair-run.js';
import { BaseCommand } from '../../cli/base-command.js';
import { createRecoverDeps } from '../../command-root.js';
import { ExitCode } from '../../core/errors.js';

export default class PairRecover extends BaseCommand {
  static override summary =
    'Recover a `pair run` that was killed: remove its container, write its result, release its slot.';
  static override description = [
    'For a pair run directory whose `pair run` process died without finishing (SIGKILL, OOM killer, a lost',
    "shell). A label sweep finds every container of the receipt's claim (roboguide.claim), stops it (SIGTERM,",
    "the stop budget, kill) and removes it, insisting on the engine's 404. Then result.json is written from the",
    'evidence on disk: harness_failure / lost_worker (plus cleanup_unverified when the removal was not proven),',
    'the outcome file kept as found, the logs as far as they were written. Finally terminal reconciliation writes',
    'terminal-proof.json and releases the capacity slot. Idempotent: run again, it finds the result and the',
    'committed proof and releases nothing. Refused while the pair run process is alive.',
    '',
    'Exit codes: 0 the slot is released (now or before); 1 it is still held (removal not verified, evidence',
    'contradicts); 2 bad usage (no receipt, a batch directory, no registry, the pair run still alive).',
  ].join('\n');
  static override examples = [
    '<%= config.bin %> pair recover --output ./run-1',
    '<%= config.bin %> pair recover --output ./run-1 --registry /srv/rg/registry.db --json',
  ];
  static override flags = {
    output: Flags.string({ description: 'the `pair run` output directory (receipt.json)', required: true }),
    registry: Flags.string({
      description:
        'the registry the pair run was admitted in (default: the one its receipt records; else $XDG_STATE_HOME/roboguide-eval/registry.db); another one than recorded is refused',
    }),
    'stop-budget': Flags.integer({
      description: 'seconds between SIGTERM and kill when the container still runs',
      min: 1,
      default: 30,
    }),
  };

  async run(): Promise<RecoverPairRunReport & { output: string }> {
    const { flags } = await this.parse(PairRecover);
    const output = resolve(flags.output);
    const report = await recoverOutput(createRecoverDeps(flags.registry), {
      output,
      stopBudgetSec: flags['stop-budget'],
    });
    const r = report.reconciliation;
    const released = r.kind === 'committed' || r.kind === 'already_committed';
    if (!released) process.exitCode = ExitCode.runtime;
    this.log(
      `pair ${report.job_id} (claim ${report.claim_id}): result ${report.result} (${report.classification})`,
    );
    this.log(
      `  containers found by label: ${report.containers.length === 0 ? 'none' : report.containers.map((c) => c.slice(0, 12)).join(', ')}; verified absent: ${report.cleanup.verified_absent}`,
    );
    this.log(
      `  slot: ${report.released_now ? 'released now' : released ? 'already released: nothing to do' : `still held (${r.reason ?? r.kind}): ${r.detail}`}`,
    );
    return { ...report, output };
  }
}
