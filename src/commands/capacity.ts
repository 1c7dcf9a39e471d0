import * as Flags from '@oclif/core/flags';
import { readCapacity, type CapacityView } from '../app/capacity-report.js';
import type { HostLimits } from '../app/ports/capacity-registry.js';
import { BaseCommand } from '../cli/base-command.js';
import { openCapacity } from '../command-root.js';
import { InvalidInputError } from '../core/errors.js';

type CapacityReport = { readonly registry: string } & CapacityView;

function parseGpuLimit(text: string): number | null {
  if (text === 'none') return null;
  if (!/^\d+$/.test(text))
    throw new InvalidInputError('E_USAGE', 'invalid flag', [
      { path: '--gpu-mib', rule: 'must be a non-negative integer (MiB) or "none"' },
    ]);
  return Number(text);
}

function limitsText(limits: HostLimits): string {
  return `${limits.maxReservations} reservation(s) at once; GPU budget ${limits.gpuMib === null ? 'none' : `${limits.gpuMib} MiB`}`;
}

export default class Capacity extends BaseCommand {
  static override summary =
    'Show the host capacity registry: limits, reservations held, board rows, GPU observation.';
  static override description =
    'Every batch on this host shares one registry (a SQLite file, or a PostgreSQL database shared by several hosts). ' +
    'A pair is admitted to a node only while fewer than --max-reservations are held there, their GPU MiB fit ' +
    '--gpu-mib (when set) and none of its published ports is held there. Limits are per node: --node sets one ' +
    "node's own; without it the default (every node without its own) is set. A change applies to every batch " +
    'from their next admission on.';
  static override examples = [
    '<%= config.bin %> capacity',
    '<%= config.bin %> capacity --batch e1-20261202-ab12cd34 --json',
    '<%= config.bin %> capacity --max-reservations 1',
  ];
  static override flags = {
    registry: Flags.string({
      description: 'registry database (default $XDG_STATE_HOME/roboguide-eval/registry.db)',
    }),
    batch: Flags.string({ description: "only this batch's reservations and board rows" }),
    'max-reservations': Flags.integer({
      description: 'set the host limit of reservations held at once',
      min: 1,
    }),
    'gpu-mib': Flags.string({ description: 'set the host GPU budget in MiB ("none": no GPU limit)' }),
    node: Flags.string({
      description: 'the node whose own limits --max-reservations/--gpu-mib set (default: the default limits)',
    }),
  };

  async run(): Promise<CapacityReport> {
    const { flags } = await this.parse(Capacity);
    const gpuLimit = flags['gpu-mib'] !== undefined ? parseGpuLimit(flags['gpu-mib']) : undefined;
    const capacity = await openCapacity(flags.registry);
    try {
      const set = {
        ...(flags['max-reservations'] !== undefined ? { maxReservations: flags['max-reservations'] } : {}),
        ...(gpuLimit !== undefined ? { gpuMib: gpuLimit } : {}),
      };
      const view = await readCapacity(capacity, {
        ...(flags.batch !== undefined ? { batchId: flags.batch } : {}),
        ...(flags.node !== undefined ? { node: flags.node } : {}),
        set,
      });
      const report: CapacityReport = { registry: capacity.registryPath, ...view };
      this.log(`registry ${report.registry}`);
      this.log(`limits (default): ${limitsText(report.limits)}`);
      for (const n of report.nodes) {
        const ports = n.held_ports.length > 0 ? `; ports ${n.held_ports.join(',')}` : '';
        this.log(
          `  node ${n.node}${n.node === report.local_node ? ' (this host)' : ''}: ${n.held} of ${n.limits.maxReservations} held, GPU ${n.held_gpu_mib} of ${n.limits.gpuMib === null ? 'no limit' : `${n.limits.gpuMib} MiB`}${ports}${n.own_limits ? '' : ' (default limits)'}`,
        );
      }
      this.log(`held: ${report.held.length}`);
      for (const r of report.held)
        this.log(
          `  ${r.batchId} ${r.jobId}  node ${r.node}  container ${r.containerId?.slice(0, 12) ?? '-'}  gpu ${r.gpuMib} MiB${r.ports.length > 0 ? `  ports ${r.ports.join(',')}` : ''}  since ${r.createdAt}`,
        );
      const running = report.board.filter((b) => b.state === 'running').length;
      this.log(
        `board: ${report.board.length} run(s), ${running} running, ${report.board.length - running} terminal`,
      );
      this.log(
        report.gpu.kind === 'observed'
          ? `gpus: ${report.gpu.gpus.length}, ${report.gpu.totalMib} MiB total`
          : `gpus: not observable (${report.gpu.reason})`,
      );
      return report;
    } finally {
      await capacity.dispose();
    }
  }
}
