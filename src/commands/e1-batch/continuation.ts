import { resolve } from 'node:path';
import * as Flags from '@oclif/core/flags';
import { writeContinuation, type ContinuationOutcome } from '../../app/batch/continuation.js';
import { BaseCommand } from '../../cli/base-command.js';
import { createContinuationWiring } from '../../command-root.js';

export default class BatchContinuation extends BaseCommand {
  static override summary = 'After a fatal pause: write a new manifest with every unclaimed job.';
  static override description =
    'The new manifest carries continuation_of (the original batch id and output, and the exact code version of ' +
    'this tool); `e1-batch start` of it refuses any job id claimed in the original batch. The original batch is not changed.';
  static override examples = [
    '<%= config.bin %> e1-batch continuation --output ./batch --manifest-out ./queue-2.json',
  ];
  static override flags = {
    output: Flags.string({ description: 'the paused batch output directory', required: true }),
    'manifest-out': Flags.string({
      description: 'where to write the new manifest (must not exist)',
      required: true,
    }),
  };

  async run(): Promise<ContinuationOutcome> {
    const { flags } = await this.parse(BatchContinuation);
    const { store, options } = await createContinuationWiring(resolve(flags.output));
    const outcome = await writeContinuation(store, {
      ...options,
      manifestOut: resolve(flags['manifest-out']),
    });
    this.log(
      `wrote ${outcome.manifest_out}: ${outcome.jobs} unclaimed job(s), continuation of ${outcome.batch_id}`,
    );
    return outcome;
  }
}
