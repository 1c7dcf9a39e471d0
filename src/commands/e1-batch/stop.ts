import { resolve } from 'node:path';
import * as Flags from '@oclif/core/flags';
import { requestStop, type StopOutcome } from '../../app/batch/stop-batch.js';
import { BaseCommand } from '../../cli/base-command.js';
import { batchOutputFlag } from '../../cli/flags.js';
import { createStopWiring } from '../../command-root.js';
import { shellWord } from '../../core/next-steps.js';

export default class BatchStop extends BaseCommand {
  static override summary =
    'Stop the batch: no new dispatch; running pairs finish and are archived (or, with --terminate, are stopped); state `stopped`.';
  static override description =
    'Writes D/stop-request.json and signals the supervisor. Without --terminate running pairs finish normally; ' +
    'with --terminate each gets a controlled stop (SIGTERM, the stop budget, then kill) and is archived. ' +
    'The supervisor exits with state "stopped" (a stop is not a pause: no pause reason is recorded, and status shows STOPPED); ' +
    '`e1-batch resume` continues the batch. With no supervisor running (a finished, paused or stopped batch) there is ' +
    'nothing to stop: it says so, writes nothing and exits 0 (the batch is not running, which is what stop asks for).';
  static override examples = [
    '<%= config.bin %> e1-batch stop --output ./batch',
    '<%= config.bin %> e1-batch stop --output ./batch --terminate',
  ];
  static override flags = {
    output: batchOutputFlag,
    terminate: Flags.boolean({
      description: 'also stop running pairs within the stop budget',
      default: false,
    }),
  };

  async run(): Promise<StopOutcome> {
    const { flags } = await this.parse(BatchStop);
    const { store, clock, host } = createStopWiring(resolve(flags.output));
    const outcome = await requestStop(store, clock, flags.terminate, host);
    const output = shellWord(flags.output); // as typed
    if (outcome.state === 'finished') {
      this.log(
        'nothing to stop: this batch has finished (every job has a result, no supervisor runs); nothing written',
      );
      this.log(`  its report: ${this.userBin} e1-batch report --output ${output}`);
    } else if (outcome.state === 'not-running') {
      this.log(
        `nothing to stop: no supervisor is running for this batch${outcome.unfinished === null ? '' : ` (${outcome.unfinished} job${outcome.unfinished === 1 ? '' : 's'} without a result)`}; nothing written`,
      );
      this.log(`  why it is not running: ${this.userBin} e1-batch status --output ${output}`);
      this.log(`  to go on: ${this.userBin} e1-batch resume --output ${output}`);
    } else {
      this.log(
        outcome.signalled
          ? `stop requested${outcome.terminate ? ' (terminate running pairs)' : ''}: supervisor pid ${outcome.pid} signalled`
          : `stop requested: written to stop-request.json (the supervisor, pid ${outcome.pid}, reads it within a second)`,
      );
      this.log(`  follow it: ${this.userBin} e1-batch status --output ${output} --watch`);
    }
    return outcome;
  }
}
