import { Flags } from '@oclif/core';
import { observeGpus } from '../adapters/nvidia-smi.js';
import { resolveRegistryPath } from '../adapters/registry/default-path.js';
import type { BoardRow, HostLimits, Reservation } from '../app/ports/capacity-registry.js';
import { BaseCommand } from '../cli/base-command.js';
import { openRegistry } from '../composition-root.js';
import type { GpuObservation } from '../core/gpu/nvidia-smi-parse.js';
import { InvalidInputError } from '../core/errors.js';

interface CapacityReport {
  readonly registry: string;
  readonly limits: HostLimits;
  readonly held: Reservation[];
  readonly board: BoardRow[];
  readonly gpu: GpuObservation;
}

function parseGpuLimit(text: string): number | null {
  if (text === 'none') return null;
  if (!/^\d+$/.test(text)) throw new InvalidInputError('E_USAGE', 'invalid flag', [{ path: '--gpu-mib', rule: 'must be a non-negative integer (MiB) or "none"' }]);
  return Number(text);
}

export default class Capacity extends BaseCommand {
  static override summary = 'Show the host capacity registry: limits, reservations held, board rows, GPU observation.';
  static override description =
    'Every batch on this host shares one registry (SQLite). A pair is admitted only while fewer than ' +
    '--max-reservations are held (and, when set, their GPU MiB fit --gpu-mib). Setting a limit changes it for every ' +
    'batch on the host from their next admission on.';
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
  };

  async run(): Promise<CapacityReport> {
    const { flags } = await this.parse(Capacity);
    const registry = openRegistry(flags.registry);
    try {
      if (flags['max-reservations'] !== undefined || flags['gpu-mib'] !== undefined) {
        const current = registry.limits();
        registry.setLimits({
          maxReservations: flags['max-reservations'] ?? current.maxReservations,
          gpuMib: flags['gpu-mib'] !== undefined ? parseGpuLimit(flags['gpu-mib']) : current.gpuMib,
        });
      }
      const filter = flags.batch !== undefined ? { batchId: flags.batch } : {};
      const report: CapacityReport = {
        registry: resolveRegistryPath(flags.registry),
        limits: registry.limits(),
        held: registry.held(filter),
        board: registry.board(filter),
        gpu: await observeGpus(),
      };
      this.log(`registry ${report.registry}`);
      this.log(`limits: ${report.limits.maxReservations} reservation(s) at once; GPU budget ${report.limits.gpuMib === null ? 'none' : `${report.limits.gpuMib} MiB`}`);
      this.log(`held: ${report.held.length}`);
      for (const r of report.held) this.log(`  ${r.batchId} ${r.jobId}  container ${r.containerId?.slice(0, 12) ?? '-'}  since ${r.createdAt}`);
      const running = report.board.filter((b) => b.state === 'running').length;
      this.log(`board: ${report.board.length} run(s), ${running} running, ${report.board.length - running} terminal`);
      this.log(
        report.gpu.kind === 'observed'
          ? `gpus: ${report.gpu.gpus.length}, ${report.gpu.totalMib} MiB total`
          : `gpus: not observable (${report.gpu.reason})`,
      );
      return report;
    } finally {
      registry.close();
    }
  }
}
