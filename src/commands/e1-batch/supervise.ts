import { resolve } from 'node:path';
import * as Flags from '@oclif/core/flags';
import { BaseCommand } from '../../cli/base-command.js';
import { runDetachedSupervisor } from '../../supervisor-root.js';

/** The detached supervisor process that `start` and `resume` launch. Not for people. */
export default class BatchSupervise extends BaseCommand {
  static override hidden = true;
  static override summary = 'Run the supervisor of a prepared batch (launched by start/resume).';
  static override flags = {
    output: Flags.string({ required: true, description: 'batch output directory' }),
    mode: Flags.string({ options: ['start', 'resume'], default: 'start', description: 'start or resume' }),
  };

  async run(): Promise<{ state: string }> {
    const { flags } = await this.parse(BatchSupervise);
    const state = await runDetachedSupervisor(
      resolve(flags.output),
      flags.mode === 'resume' ? 'resume' : 'start',
    );
    return { state };
  }
}
