import { resolve } from 'node:path';
import * as Flags from '@oclif/core/flags';
import { prepareBatch } from '../../app/batch/start-batch.js';
import { BaseCommand } from '../../cli/base-command.js';
import {
  bindAddressFlag,
  admissionRegistryFlag,
  allowShortSecretsFlag,
  executorFlags,
  mountRootFlags,
  mountRootsFrom,
} from '../../cli/flags.js';
import { createBatchStartWiring, outputSpaceWarning } from '../../command-root.js';
import { executorFromFlags } from '../../core/executor.js';
import { watchForeground } from '../../cli/foreground-progress.js';
import { shellWord } from '../../core/next-steps.js';

export default class BatchStart extends BaseCommand {
  static override summary =
    'Validate a manifest, freeze it into a new output directory and launch the supervisor.';
  static override description = [
    'Nothing is written unless the manifest validates, every referenced ${NAME} variable is set, no outcome_path',
    'exists yet or holds a symlink, no cwd or outcome folder reaches the output directory, the registry, a system',
    'folder, the engine socket or $HOME, the registry opens, the engine answers and every image is present. The manifest is frozen byte-identical into',
    'D/manifest.json with the batch identity in D/batch.json; then a detached supervisor (own process group, log in',
    'D/supervisor.log) runs the pairs in manifest order. Follow it with `e1-batch status --watch`.',
  ].join('\n');
  static override examples = [
    '<%= config.bin %> e1-batch start --manifest queue.json --output /abs/local/batch',
    '<%= config.bin %> e1-batch start --manifest queue.json --output ./batch --foreground --json',
  ];
  static override flags = {
    manifest: Flags.string({ description: 'manifest JSON (schema roboguide.e1.batch/v0.1)', required: true }),
    output: Flags.string({
      description: 'new or empty output directory (the evidence archive)',
      required: true,
    }),
    registry: admissionRegistryFlag,
    'bind-address': bindAddressFlag,
    foreground: Flags.boolean({
      description: 'run the supervisor in this process until the batch drains, stops or pauses',
      default: false,
    }),
    ...executorFlags,
    'allow-short-secrets': allowShortSecretsFlag,
    'prune-own-images': Flags.boolean({
      description:
        'images this batch pulls may make room by removing images the engine had before the batch (never one a container uses)',
      default: false,
    }),
    ...mountRootFlags,
  };

  async run(): Promise<{
    batch_id: string;
    output: string;
    supervisor_pid: number;
    state?: string;
    warnings?: readonly string[];
  }> {
    const { flags } = await this.parse(BatchStart);
    const output = resolve(flags.output);
    const executor = executorFromFlags(flags);
    const mountRoots = await mountRootsFrom(flags['mount-root'], flags['mount-root-only']);
    const wiring = await createBatchStartWiring(executor, flags.registry);
    const record = await prepareBatch(wiring.deps, {
      ...wiring.host,
      manifestPath: flags.manifest,
      output,
      bindAddress: flags['bind-address'],
      allowShortSecrets: flags['allow-short-secrets'],
      pruneOwnImages: flags['prune-own-images'],
      mountRoots,
      executor,
      bin: this.userBin,
      outputAsTyped: flags.output,
      onWarning: (message) => this.warn(message),
    });
    const warnings = [...(record.gpu_observation?.warnings ?? [])];
    const space = await outputSpaceWarning(output); // advisory: never stops a batch that was created
    if (space !== null) warnings.push(space);
    for (const warning of warnings) this.warn(warning);
    if (flags.foreground) {
      const watch = watchForeground(output, this.userBin);
      let state: string;
      try {
        state = await wiring.supervisor.here(output);
      } finally {
        await watch.stop();
      }
      this.log(`batch ${record.batch_id}: ${state} (${output})`);
      // Stopped by a signal: the exit status a shell expects (130 for SIGINT, 143 for SIGTERM), not 0.
      const code = watch.exitCode();
      if (code !== null) process.exitCode = code;
      return { batch_id: record.batch_id, output, supervisor_pid: process.pid, state, warnings };
    }
    const identity = await wiring.supervisor.launch(output);
    this.log(`batch ${record.batch_id} started: supervisor pid ${identity.pid}, evidence in ${output}`);
    // The folder as typed (issue 40: an absolute path came back relative), quoted where a shell needs it.
    this.log(`  follow it: ${this.userBin} e1-batch status --output ${shellWord(flags.output)} --watch`);
    return { batch_id: record.batch_id, output, supervisor_pid: identity.pid, warnings };
  }
}
