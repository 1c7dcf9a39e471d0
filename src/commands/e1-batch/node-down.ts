import { resolve } from 'node:path';
import * as Flags from '@oclif/core/flags';
import { declareNodeDown, type NodeDownReport } from '../../app/batch/node-down.js';
import { BaseCommand } from '../../cli/base-command.js';
import { batchOutputFlag } from '../../cli/flags.js';
import { createNodeDownDeps } from '../../command-root.js';

export default class BatchNodeDown extends BaseCommand {
  static override summary =
    'Declare a swarm node gone for good: the slots of the pairs lost with it are released.';
  static override description = [
    'A pair whose node was lost while it ran ends as infrastructure_failure/node_lost and is never run again; its',
    'slot stays held because its container could not be verified gone on that node. Once the operator knows the node',
    'is gone (powered off, drained and wiped), this records it in D/nodes-down.json and releases those slots through',
    "terminal reconciliation, still insisting on every other node's 404. The batch itself goes on (or was already done).",
  ].join('\n');
  static override examples = ['<%= config.bin %> e1-batch node-down --output ./batch --node gpu-7'];
  static override flags = {
    output: batchOutputFlag,
    node: Flags.string({
      description: 'the swarm node (its hostname or swarm node id) that is gone',
      required: true,
    }),
  };

  async run(): Promise<NodeDownReport> {
    const { flags } = await this.parse(BatchNodeDown);
    const deps = await createNodeDownDeps(resolve(flags.output));
    try {
      const report = await declareNodeDown(deps, flags.node);
      this.log(
        `node ${report.node} declared down; slots released: ${report.released.length}/${report.held.length}${report.released.length ? ` (${report.released.join(', ')})` : ''}`,
      );
      if (report.released.length < report.held.length) process.exitCode = 1;
      return report;
    } finally {
      await deps.dispose();
    }
  }
}
