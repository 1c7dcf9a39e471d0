import { join } from 'node:path';
import { BATCH_FILE } from '../../core/evidence-names.js';
import type {
  BatchSnapshot,
  HostSnapshot,
  NodeCapacity,
  RegistrySnapshot,
} from '../../core/metrics/host-snapshot.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import type { CapacityRegistry } from '../ports/capacity-registry.js';
import type { FileSystem } from '../ports/file-system.js';
import type { Logger } from '../ports/logger.js';
import { BatchWatch, type BatchWatchDeps } from './batch-watch.js';

export interface HostScanOptions {
  /** `--batches`: each a batch folder (it holds batch.json) or a folder whose direct sub-folders are batches. */
  readonly roots: readonly string[];
  /** At most this many batches are exported (those changed most recently first). Default 50. */
  readonly maxBatches?: number;
  /** A drained or stopped batch is exported until its files are this old. Default 3600 s. */
  readonly keepEndedSec?: number;
  /** The roots are listed again after this long. Default 30 s. */
  readonly rediscoverMs?: number;
}

export interface HostScanDeps extends BatchWatchDeps {
  readonly fs: Pick<FileSystem, 'lstat' | 'readdir'>;
  readonly storeAt: (dir: string) => EvidenceStore;
  /** The host's capacity registry; null: none configured (no registry series). */
  readonly registry: CapacityRegistry | null;
  readonly logger: Logger;
}

/**
 * The exporter's read of a host (issue 45): the batch folders under the roots, each through its own `BatchWatch`,
 * and the capacity registry's nodes. Read-only; never the supervisor's memory: a SIGKILLed supervisor is seen as
 * its files and /proc show it (down).
 */
export class HostScan {
  readonly #deps: HostScanDeps;
  readonly #options: Required<HostScanOptions>;
  readonly #watches = new Map<string, BatchWatch>();
  #discoveredAtMs = -Infinity;

  constructor(deps: HostScanDeps, options: HostScanOptions) {
    this.#deps = deps;
    this.#options = { maxBatches: 50, keepEndedSec: 3600, rediscoverMs: 30_000, ...options };
  }

  async scan(now: Date): Promise<HostSnapshot> {
    if (now.getTime() - this.#discoveredAtMs >= this.#options.rediscoverMs) {
      await this.#discover();
      this.#discoveredAtMs = now.getTime();
    }
    const [scanned, registry] = await Promise.all([this.#scanBatches(now), this.#readRegistry()]);
    const batches = scanned.flatMap((s) => (s === null ? [] : [s]));
    return {
      batches: this.#exported(batches),
      registry,
      unreadable: scanned.length - batches.length,
      discovered: this.#watches.size,
    };
  }

  /** Not ended, or ended within `keepEndedSec`; at most `maxBatches`, the most recently changed first. */
  #exported(batches: readonly BatchSnapshot[]): BatchSnapshot[] {
    const keep = batches.filter(
      (b) =>
        (b.state !== 'drained' && b.state !== 'stopped') ||
        (b.supervisor.heartbeatAgeSec ?? Infinity) < this.#options.keepEndedSec,
    );
    keep.sort(
      (a, b) => (a.supervisor.heartbeatAgeSec ?? Infinity) - (b.supervisor.heartbeatAgeSec ?? Infinity),
    );
    return keep.slice(0, this.#options.maxBatches);
  }

  async #scanBatches(now: Date): Promise<(BatchSnapshot | null)[]> {
    return Promise.all(
      [...this.#watches.values()].map((watch) =>
        watch.scan(now).catch((err: unknown) => {
          this.#deps.logger.warn({ batch: watch.root, error: (err as Error).message }, 'batch unreadable');
          return null;
        }),
      ),
    );
  }

  async #isBatch(dir: string): Promise<boolean> {
    const info = await this.#deps.fs.lstat(join(dir, BATCH_FILE)).catch(() => null);
    return info?.kind === 'file';
  }

  async #discover(): Promise<void> {
    const found = new Set<string>();
    for (const root of this.#options.roots) {
      if (await this.#isBatch(root)) {
        found.add(root);
        continue;
      }
      const entries = await this.#deps.fs.readdir(root).catch(() => []);
      const dirs = entries.filter((e) => e.kind === 'directory').map((e) => join(root, e.name));
      const batches = await Promise.all(dirs.map(async (d) => ((await this.#isBatch(d)) ? d : null)));
      for (const dir of batches) if (dir !== null) found.add(dir);
    }
    for (const dir of this.#watches.keys()) if (!found.has(dir)) this.#watches.delete(dir);
    for (const dir of found)
      if (!this.#watches.has(dir))
        this.#watches.set(dir, new BatchWatch(this.#deps, this.#deps.storeAt(dir)));
  }

  /** Per node: slots held and allowed, GPU MiB held and budgeted. Null when the registry does not answer. */
  async #readRegistry(): Promise<RegistrySnapshot | null> {
    const registry = this.#deps.registry;
    if (registry === null) return null;
    try {
      const [held, own, defaults] = await Promise.all([
        registry.held(),
        registry.nodeLimits(),
        registry.limits(),
      ]);
      const names = new Set([registry.localNode, ...own.map((n) => n.node), ...held.map((r) => r.node)]);
      const nodes: NodeCapacity[] = [...names].sort().map((node) => {
        const limits = own.find((n) => n.node === node)?.limits ?? defaults;
        const mine = held.filter((r) => r.node === node);
        return {
          node,
          slotsHeld: mine.length,
          slotsLimit: limits.maxReservations,
          gpuMibHeld: mine.reduce((sum, r) => sum + r.gpuMib, 0),
          gpuMibBudget: limits.gpuMib,
        };
      });
      return { nodes };
    } catch (err) {
      this.#deps.logger.warn({ error: (err as Error).message }, 'registry unreadable');
      return null;
    }
  }
}
