import { resolve } from 'node:path';
import * as Flags from '@oclif/core/flags';
import { supervise } from '../../app/batch/supervisor.js';
import { BaseCommand } from '../../cli/base-command.js';
import { createSupervisorDeps } from '../../composition-root.js';
import { createSupervisorLogger } from '../../command-root.js';

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
    const output = resolve(flags.output);
    const logger = await createSupervisorLogger(output);
    const deps = await createSupervisorDeps(output, logger);
    try {
      const state = await supervise(deps, flags.mode === 'resume' ? 'resume' : 'start');
      return { state };
    } finally {
      await deps.dispose();
      logger.flush();
    }
  }
}
