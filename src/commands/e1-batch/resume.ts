import { resolve } from 'node:path';
import { Flags } from '@oclif/core';
import { EvidenceStore } from '../../app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../adapters/fs/node-file-system.js';
import { launchSupervisor } from '../../adapters/supervisor-launcher.js';
import { checkResumable } from '../../app/batch/resume-batch.js';
import { supervise } from '../../app/batch/supervisor.js';
import { BaseCommand } from '../../cli/base-command.js';
import { BIN_RUN_JS, batchLogSecrets, createStderrLogger, createSupervisorDeps, hostIdentity } from '../../composition-root.js';

export default class BatchResume extends BaseCommand {
  static override summary = 'Restart the supervisor of a stopped, paused or crashed batch.';
  static override description = [
    'Refuses while the recorded supervisor is alive (same pid, start time and boot id). The new supervisor first',
    'reconciles every claimed pair without a result: a running container is reattached (logs continue without',
    'duplicated or lost lines), an exited one is collected and finished, a vanished one (or one from before a',
    'reboot) becomes harness_failure/lost_worker. A claimed pair is never launched again. Resume clears the',
    'stopped, infrastructure_streak, harness and provider pauses; a fatal pause stays (see `e1-batch continuation`).',
  ].join('\n');
  static override examples = ['<%= config.bin %> e1-batch resume --output ./batch'];
  static override flags = {
    output: Flags.string({ description: 'batch output directory', required: true }),
    foreground: Flags.boolean({ description: 'run the supervisor in this process', default: false }),
  };

  async run(): Promise<{ output: string; unfinished: number; supervisor_pid: number; state?: string }> {
    const { flags } = await this.parse(BatchResume);
    const output = resolve(flags.output);
    const unfinished = await checkResumable(new EvidenceStore(new NodeFileSystem(), output), process.env, hostIdentity);
    if (flags.foreground) {
      const deps = await createSupervisorDeps(output, createStderrLogger(await batchLogSecrets(output)));
      try {
        const state = await supervise(deps, 'resume');
        this.log(`batch resumed and supervised to: ${state}`);
        return { output, unfinished, supervisor_pid: process.pid, state };
      } finally {
        await deps.dispose();
      }
    }
    const identity = await launchSupervisor(BIN_RUN_JS, output, 'resume');
    this.log(`resumed: supervisor pid ${identity.pid}; ${unfinished} job(s) without a result`);
    return { output, unfinished, supervisor_pid: identity.pid };
  }
}
