import { resolve } from 'node:path';
import { Flags } from '@oclif/core';
import { checkResumable } from '../../app/batch/resume-batch.js';
import { BaseCommand } from '../../cli/base-command.js';
import { batchOutputFlag } from '../../cli/flags.js';
import { evidenceStoreAt, hostIdentity, launchBatchSupervisor, superviseHere } from '../../command-root.js';

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
    output: batchOutputFlag,
    foreground: Flags.boolean({ description: 'run the supervisor in this process', default: false }),
  };

  async run(): Promise<{ output: string; unfinished: number; supervisor_pid: number; state?: string }> {
    const { flags } = await this.parse(BatchResume);
    const output = resolve(flags.output);
    const unfinished = await checkResumable(evidenceStoreAt(output), process.env, hostIdentity);
    if (flags.foreground) {
      const state = await superviseHere(output, 'resume');
      this.log(`batch resumed and supervised to: ${state}`);
      return { output, unfinished, supervisor_pid: process.pid, state };
    }
    const identity = await launchBatchSupervisor(output, 'resume');
    this.log(`resumed: supervisor pid ${identity.pid}; ${unfinished} job(s) without a result`);
    return { output, unfinished, supervisor_pid: identity.pid };
  }
}
