import { resolve } from 'node:path';
import * as Flags from '@oclif/core/flags';
import { movedImageLine } from '../../app/batch/image-pins.js';
import { alreadyDrained, checkResumable } from '../../app/batch/resume-batch.js';
import { BaseCommand } from '../../cli/base-command.js';
import { batchOutputFlag } from '../../cli/flags.js';
import { createResumeWiring } from '../../command-root.js';
import { watchForeground } from '../../cli/foreground-progress.js';

export default class BatchResume extends BaseCommand {
  static override summary = 'Restart the supervisor of a stopped, paused or crashed batch.';
  static override description = [
    'Refuses while the recorded supervisor is alive (same pid, start time and boot id). The new supervisor first',
    'reconciles every claimed pair without a result: a running container is reattached (logs continue without',
    'duplicated or lost lines), an exited one is collected and finished, a vanished one (or one from before a',
    'reboot) becomes harness_failure/lost_worker. A claimed pair is never launched again. Resume clears the',
    'stopped, infrastructure_streak, harness and provider pauses; a fatal pause stays (see `e1-batch continuation`).',
    'A batch that already drained (every job has a result) starts no supervisor. Pairs run the image ids `start`',
    'pinned: a tag rebuilt since is reported (a warning) and never followed.',
  ].join('\n');
  static override examples = ['<%= config.bin %> e1-batch resume --output ./batch'];
  static override flags = {
    output: batchOutputFlag,
    foreground: Flags.boolean({ description: 'run the supervisor in this process', default: false }),
  };

  async run(): Promise<{
    output: string;
    unfinished: number;
    supervisor_pid: number | null;
    state?: string;
  }> {
    const { flags } = await this.parse(BatchResume);
    const output = resolve(flags.output);
    const { store, host, movedImages, supervisor } = createResumeWiring(output);
    const unfinished = await checkResumable(store, process.env, host);
    if (await alreadyDrained(store, unfinished)) {
      this.log(
        `batch already drained: every job has a result; no supervisor started (see \`${this.userBin} e1-batch report --output ${output}\`)`,
      );
      return { output, unfinished, supervisor_pid: null, state: 'drained' };
    }
    // A tag rebuilt since start is never followed: the pairs still to run use the image the batch pinned.
    for (const moved of await movedImages()) this.warn(movedImageLine(moved));
    if (flags.foreground) {
      const watch = watchForeground(output, this.userBin);
      let state: string;
      try {
        state = await supervisor.here(output);
      } finally {
        await watch.stop();
      }
      this.log(`batch resumed and supervised to: ${state}`);
      const code = watch.exitCode(); // stopped by a signal: 130 (SIGINT) or 143 (SIGTERM), as for start
      if (code !== null) process.exitCode = code;
      return { output, unfinished, supervisor_pid: process.pid, state };
    }
    const identity = await supervisor.launch(output);
    this.log(`resumed: supervisor pid ${identity.pid}; ${unfinished} job(s) without a result`);
    return { output, unfinished, supervisor_pid: identity.pid };
  }
}
