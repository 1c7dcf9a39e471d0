import { resolve } from 'node:path';
import * as Flags from '@oclif/core/flags';
import type { BatchStatus } from '../../app/batch/status-shapes.js';
import { BaseCommand } from '../../cli/base-command.js';
import { batchOutputFlag } from '../../cli/flags.js';
import { renderStatus } from '../../cli/status-view.js';
import { createStatusReader } from '../../command-root.js';
import { batchFailed } from '../../core/batch-verdict.js';
import { ExitCode } from '../../core/errors.js';
import { terminalSafe } from '../../core/terminal-text.js';

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
    watch: Flags.boolean({
      description: 'refresh every second until the batch drains, stops or pauses',
      default: false,
    }),
    'exit-status': Flags.boolean({
      description: 'exit 4 when the batch is paused or finished with failures',
      default: false,
    }),
  };

  async run(): Promise<BatchStatus> {
    const { flags } = await this.parse(BatchStatusCommand);
    const readStatus = await createStatusReader(resolve(flags.output));
    let status = await readStatus(new Date());
    const hint = { bin: this.userBin, output: flags.output }; // as typed: the next command names them so
    if (flags.watch && !this.jsonEnabled()) {
      // On a terminal: redraw in place. Piped: print the view again only when it changed (no escape codes).
      let last = '';
      for (;;) {
        // Written directly (the redraw's own escape codes): the view made inert here, as log() does for the rest.
        const view = terminalSafe(renderStatus(status, new Date(), hint));
        if (process.stdout.isTTY) process.stdout.write(`\x1b[2J\x1b[H${view}\n`);
        else if (withoutElapsed(view) !== last) process.stdout.write(`${view}\n\n`);
        last = withoutElapsed(view);
        if (status.state !== 'running' && status.state !== 'stopping') break;
        if (process.stdout.destroyed) break; // read through a pipe that closed (`| head`): nobody is watching

        await new Promise((r) => setTimeout(r, 1000));
        status = await readStatus(new Date());
      }
    } else {
      this.log(renderStatus(status, new Date(), hint));
    }
    if (flags['exit-status'] && batchFailed(status)) process.exitCode = ExitCode.batchFailed;
    return status;
  }
}
