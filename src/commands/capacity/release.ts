import * as Flags from '@oclif/core/flags';
import { releaseLostSlot, type ReleaseLostResult } from '../../app/release-lost-slot.js';
import { BaseCommand } from '../../cli/base-command.js';
import { previewExecuteFlags } from '../../cli/flags.js';
import { ExitCode } from '../../core/errors.js';
import { createReleaseLostWiring } from '../../release-lost-wiring.js';

type ReleaseJson = ReleaseLostResult & {
  readonly registry: string;
  readonly batch: string;
  readonly job: string;
};

export default class CapacityRelease extends BaseCommand {
  static override summary =
    'Give back a slot whose evidence folder is gone (deleted), after proving nothing runs.';
  static override description = [
    'A reservation is given back by terminal reconciliation (`reconcile --output DIR`), which proves the pair from',
    'its evidence. When that folder is gone (deleted by hand, a disk replaced), nothing can prove it and the slot',
    'stays held for ever. This command gives it back on the proof the engine and the registry can still give:',
    "the batch's supervisor is not alive, the pair's container was created and is gone (inspect 404, no container",
    'with its claim label), and the evidence folder the reservation holds is absent (a',
    'working folder the pair mounted may remain). It writes that proof beside the registry (lost-evidence/<run id>.json), then marks the run terminal',
    '(infrastructure_failure, evidence_lost) and releases the reservation in one transaction. Anything still',
    'present refuses, naming it and what to do instead; --preview shows the plan and writes nothing.',
    '',
    'Exit codes: 0 released, already released or (preview) would release; 1 refused; 2 bad usage (no such',
    'registry, or no reservation of that batch and job held in it).',
  ].join('\n');
  static override examples = [
    '<%= config.bin %> capacity release --batch pair-run-668dbeea --job stubborn --evidence-lost --preview',
    '<%= config.bin %> capacity release --batch e1-20261202-ab12cd34 --job pair-0007 --evidence-lost --execute',
  ];
  static override flags = {
    batch: Flags.string({
      description: 'the batch id the reservation belongs to (see `capacity`)',
      required: true,
    }),
    job: Flags.string({ description: 'the job id of the held reservation', required: true }),
    'evidence-lost': Flags.boolean({
      description: "you state that the pair's evidence folder is gone (checked: it must be absent)",
      required: true,
    }),
    ...previewExecuteFlags({
      preview: 'show the checks and the plan; change nothing',
      execute: 'write the proof and release',
    }),
    registry: Flags.string({
      description: 'registry database (default $XDG_STATE_HOME/roboguide-eval/registry.db); never created',
    }),
  };

  async run(): Promise<ReleaseJson> {
    const { flags } = await this.parse(CapacityRelease);
    const wiring = await createReleaseLostWiring(flags.registry);
    try {
      const result = await releaseLostSlot(wiring.deps, {
        batchId: flags.batch,
        jobId: flags.job,
        mode: flags.execute ? 'execute' : 'preview',
      });
      if (result.kind === 'refused') {
        this.log(`${flags.job}: REFUSED (${result.reason}): ${result.detail}`);
        this.log(`next: ${result.next}`);
        process.exitCode = result.reason === 'no_such_reservation' ? ExitCode.invalidInput : ExitCode.runtime;
      } else {
        this.log(`${flags.job}: ${result.kind}: ${result.detail}`);
        for (const step of result.steps) this.log(`  - ${step}`);
        this.log(
          `proof: ${result.proof_path ?? "the pair's terminal-proof.json"} (sha256 ${result.proof_sha256})`,
        );
      }
      return { registry: wiring.registryPath, batch: flags.batch, job: flags.job, ...result };
    } finally {
      await wiring.dispose();
    }
  }
}
