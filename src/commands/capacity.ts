import { Flags } from '@oclif/core';
import { observeGpus } from '../adapters/nvidia-smi.js';
import { registryLocation } from '../adapters/registry/default-path.js';
import type { BoardRow, CapacityRegistry, HostLimits, Reservation } from '../app/ports/capacity-registry.js';
import { BaseCommand } from '../cli/base-command.js';
import { openRegistry } from '../composition-root.js';
import type { GpuObservation } from '../core/gpu/nvidia-smi-parse.js';
import { InvalidInputError } from '../core/errors.js';

/** One node's limits and what is held on it. */
interface NodeCapacity {
  readonly node: string;
  readonly limits: HostLimits;
  /** Whether the node has limits of its own (else the default applies). */
  readonly own_limits: boolean;
  readonly held: number;
  readonly held_gpu_mib: number;
  readonly held_ports: number[];
}

interface CapacityReport {
  readonly registry: string;
  /** The default limits: every node without its own. */
  readonly limits: HostLimits;
  /** This host's node name (what local pairs are admitted to). */
  readonly local_node: string;
  readonly nodes: NodeCapacity[];
  readonly held: Reservation[];
  readonly board: BoardRow[];
  readonly gpu: GpuObservation;
}

function parseGpuLimit(text: string): number | null {
  if (text === 'none') return null;
  if (!/^\d+$/.test(text)) throw new InvalidInputError('E_USAGE', 'invalid flag', [{ path: '--gpu-mib', rule: 'must be a non-negative integer (MiB) or "none"' }]);
  return Number(text);
}

function limitsText(limits: HostLimits): string {
  return `${limits.maxReservations} reservation(s) at once; GPU budget ${limits.gpuMib === null ? 'none' : `${limits.gpuMib} MiB`}`;
}

/** Every node that has limits of its own or holds something, plus this host (and the node named by --node). */
async function nodeCapacities(registry: CapacityRegistry, named: string | undefined): Promise<NodeCapacity[]> {
  const own = await registry.nodeLimits();
  const held = await registry.held();
  const names = new Set([registry.localNode, ...own.map((n) => n.node), ...held.map((r) => r.node), ...(named !== undefined ? [named] : [])]);
  const nodes: NodeCapacity[] = [];
  for (const node of [...names].sort()) {
    const mine = held.filter((r) => r.node === node);
    nodes.push({
      node,
      limits: await registry.limits(node),
      own_limits: own.some((n) => n.node === node),
      held: mine.length,
      held_gpu_mib: mine.reduce((sum, r) => sum + r.gpuMib, 0),
      held_ports: mine.flatMap((r) => r.ports).sort((a, b) => a - b),
    });
  }
  return nodes;
}

export default class Capacity extends BaseCommand {
  static override summary = 'Show the host capacity registry: limits, reservations held, board rows, GPU observation.';
  static override description =
    'Every batch on this host shares one registry (a SQLite file, or a PostgreSQL database shared by several hosts). ' +
    'A pair is admitted to a node only while fewer than --max-reservations are held there, their GPU MiB fit ' +
    '--gpu-mib (when set) and none of its published ports is held there. Limits are per node: --node sets one ' +
    'node\'s own; without it the default (every node without its own) is set. A change applies to every batch ' +
    'from their next admission on.';
  static override examples = [
    '<%= config.bin %> capacity',
    '<%= config.bin %> capacity --batch e1-20261202-ab12cd34 --json',
    '<%= config.bin %> capacity --max-reservations 1',
  ];
  static override flags = {
    registry: Flags.string({ description: 'registry database (default $XDG_STATE_HOME/roboguide-eval/registry.db)' }),
    batch: Flags.string({ description: 'only this batch\'s reservations and board rows' }),
    'max-reservations': Flags.integer({ description: 'set the host limit of reservations held at once', min: 1 }),
    'gpu-mib': Flags.string({ description: 'set the host GPU budget in MiB ("none": no GPU limit)' }),
    node: Flags.string({ description: 'the node whose own limits --max-reservations/--gpu-mib set (default: the default limits)' }),
  };

  async run(): Promise<CapacityReport> {
    const { flags } = await this.parse(Capacity);
    const gpuLimit = flags['gpu-mib'] !== undefined ? parseGpuLimit(flags['gpu-mib']) : undefined;
    const location = registryLocation(flags.registry);
    const registry = await openRegistry(flags.registry);
    try {
      if (flags['max-reservations'] !== undefined || gpuLimit !== undefined) {
        const current = await registry.limits(flags.node);
        await registry.setLimits(
          {
            maxReservations: flags['max-reservations'] ?? current.maxReservations,
            gpuMib: gpuLimit !== undefined ? gpuLimit : current.gpuMib,
          },
          flags.node,
        );
      }
      const filter = flags.batch !== undefined ? { batchId: flags.batch } : {};
      const report: CapacityReport = {
        registry: location.path,
        limits: await registry.limits(),
        local_node: registry.localNode,
        nodes: await nodeCapacities(registry, flags.node),
        held: await registry.held(filter),
        board: await registry.board(filter),
        gpu: await observeGpus(),
      };
      this.log(`registry ${report.registry}`);
      this.log(`limits (default): ${limitsText(report.limits)}`);
      for (const n of report.nodes) {
        const ports = n.held_ports.length > 0 ? `; ports ${n.held_ports.join(',')}` : '';
        this.log(`  node ${n.node}${n.node === report.local_node ? ' (this host)' : ''}: ${n.held} of ${n.limits.maxReservations} held, GPU ${n.held_gpu_mib} of ${n.limits.gpuMib === null ? 'no limit' : `${n.limits.gpuMib} MiB`}${ports}${n.own_limits ? '' : ' (default limits)'}`);
      }
      this.log(`held: ${report.held.length}`);
      for (const r of report.held) this.log(`  ${r.batchId} ${r.jobId}  node ${r.node}  container ${r.containerId?.slice(0, 12) ?? '-'}  gpu ${r.gpuMib} MiB${r.ports.length > 0 ? `  ports ${r.ports.join(',')}` : ''}  since ${r.createdAt}`);
      const running = report.board.filter((b) => b.state === 'running').length;
      this.log(`board: ${report.board.length} run(s), ${running} running, ${report.board.length - running} terminal`);
      this.log(
        report.gpu.kind === 'observed'
          ? `gpus: ${report.gpu.gpus.length}, ${report.gpu.totalMib} MiB total`
          : `gpus: not observable (${report.gpu.reason})`,
      );
      return report;
    } finally {
      await registry.close();
    }
  }
}
