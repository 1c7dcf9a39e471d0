import { resolve } from 'node:path';
import { Flags } from '@oclif/core';
import { readCodeVersion } from '../../adapters/code-version.js';
import { freeDiskBytes } from '../../adapters/doctor-probes.js';
import { EvidenceStore } from '../../app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../adapters/fs/node-file-system.js';
import { DEFAULT_EXTRACT_LIMITS } from '../../adapters/safe-extract.js';
import { observeGpus } from '../../adapters/nvidia-smi.js';
import { hostAddresses } from '../../adapters/host-addresses.js';
import { isPostgresLocation, registryLocation } from '../../adapters/registry/default-path.js';
import { openRegistryAt } from '../../adapters/registry/open-registry.js';
import { launchSupervisor } from '../../adapters/supervisor-launcher.js';
import { batchSpaceWarning } from '../../app/batch/output-space.js';
import { checkRegistryNeeds, prepareBatch } from '../../app/batch/start-batch.js';
import { supervise } from '../../app/batch/supervisor.js';
import { systemClock } from '../../app/ports/clock.js';
import { BaseCommand } from '../../cli/base-command.js';
import { executorFromFlags } from '../../core/executor.js';
import {
  BIN_RUN_JS,
  batchLogSecrets,
  createExecutorRuntime,
  createSwarmRuntime,
  createStderrLogger,
  executorFlags,
  createSupervisorDeps,
  gatherBatchHostFacts,
  hostProtectedPaths,
  PACKAGE_ROOT,
} from '../../composition-root.js';

export default class BatchStart extends BaseCommand {
  static override summary = 'Validate a manifest, freeze it into a new output directory and launch the supervisor.';
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
    output: Flags.string({ description: 'new or empty output directory (the evidence archive)', required: true }),
    registry: Flags.string({ description: 'host capacity registry: an existing registry, or a new file in an existing folder (default $XDG_STATE_HOME/roboguide-eval/registry.db, created on first use)' }),
    'bind-address': Flags.string({ description: 'host IP address published ports bind to (one this host has, or 0.0.0.0)', default: '127.0.0.1' }),
    foreground: Flags.boolean({ description: 'run the supervisor in this process until the batch drains, stops or pauses', default: false }),
    ...executorFlags,
    'allow-short-secrets': Flags.boolean({
      description: 'accept ${NAME} values shorter than 8 characters (refused otherwise); every occurrence is masked in all output, with a warning',
      default: false,
    }),
  };

  async run(): Promise<{ batch_id: string; output: string; supervisor_pid: number; state?: string; warnings?: readonly string[] }> {
    const { flags } = await this.parse(BatchStart);
    const output = resolve(flags.output);
    const executor = executorFromFlags(flags);
    const registry = registryLocation(flags.registry);
    const runtime = createExecutorRuntime(executor);
    const record = await prepareBatch(
      {
        fs: new NodeFileSystem(),
        runtime,
        ...(executor.kind === 'swarm'
          ? { swarmNodes: async () => (await (await createSwarmRuntime(executor)).nodes()).map((n) => ({ node: n.hostname, gpus: n.gpus })) }
          : {}),
        clock: systemClock,
        observeGpus: () => observeGpus(),
        hostFacts: gatherBatchHostFacts,
        checkRegistry: async (needs) => {
          const opened = await openRegistryAt(registry);
          try {
            await checkRegistryNeeds(opened, needs);
          } finally {
            await opened.close();
          }
        },
      },
      {
        manifestPath: flags.manifest,
        output,
        registryPath: registry.path,
        bindAddress: flags['bind-address'],
        hostAddresses: hostAddresses(),
        hostPaths: hostProtectedPaths(),
        environment: process.env,
        codeVersion: await readCodeVersion(PACKAGE_ROOT),
        allowShortSecrets: flags['allow-short-secrets'],
        executor,
        onWarning: (message) => this.warn(message),
      },
    );
    const warnings = [...(record.gpu_observation?.warnings ?? [])];
    const space = await batchSpaceWarning(new EvidenceStore(new NodeFileSystem(), output), {
      freeDiskBytes,
      sessionsMaxBytes: DEFAULT_EXTRACT_LIMITS.maxTotalBytes,
    }).catch(() => null); // advisory: never stops a batch that was created
    if (space !== null) warnings.push(space);
    for (const warning of warnings) this.warn(warning);
    if (flags.foreground) {
      const deps = await createSupervisorDeps(output, createStderrLogger(await batchLogSecrets(output)));
      try {
        const state = await supervise({ ...deps, handleSignals: true }, 'start');
        this.log(`batch ${record.batch_id}: ${state} (${output})`);
        return { batch_id: record.batch_id, output, supervisor_pid: process.pid, state, warnings };
      } finally {
        await deps.dispose();
      }
    }
    // The supervisor reopens the registry from batch.json, where a PostgreSQL URL is recorded without its password.
    const password = isPostgresLocation(registry) ? registry.connection.password : undefined;
    const identity = await launchSupervisor(BIN_RUN_JS, output, 'start', password !== undefined ? { PGPASSWORD: password } : {});
    this.log(`batch ${record.batch_id} started: supervisor pid ${identity.pid}, evidence in ${output}`);
    this.log(`  follow it: npx roboguide-eval e1-batch status --output ${output} --watch`);
    return { batch_id: record.batch_id, output, supervisor_pid: identity.pid, warnings };
  }
}
