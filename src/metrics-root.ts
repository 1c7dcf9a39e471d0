import { existsSync } from 'node:fs';
import { NodeFileSystem } from './adapters/fs/node-file-system.js';
import { procHostIdentity } from './adapters/host-identity.js';
import { startMetricsListener } from './adapters/http/metrics-listener.js';
import { ExporterMetrics } from './adapters/metrics/exporter-metrics.js';
import { instrumentRegistry } from './adapters/metrics/instrumented-registry.js';
import { isPostgresLocation, registryLocation } from './adapters/registry/default-path.js';
import { openRegistryAt } from './adapters/registry/open-registry.js';
import { readStatus } from './app/batch/read-status.js';
import { EvidenceStore } from './app/evidence/evidence-store.js';
import { HostScan, type HostScanOptions } from './app/metrics/host-scan.js';
import type { CapacityRegistry } from './app/ports/capacity-registry.js';
import { createStderrLogger } from './composition-root.js';

/**
 * The root of the metrics exporter, one process kind (`roboguide-eval metrics`, issue 45): the host's batches and
 * registry, read-only, on GET /metrics; its own diagnostics on stderr.
 */
export interface ExporterOptions extends HostScanOptions {
  readonly host: string;
  readonly port: number;
  readonly token: string | null;
  /** `--registry` as given (default: the host's default registry); `none`: no registry series. */
  readonly registryFlag: string | undefined;
}

export interface RunningExporter {
  readonly port: number;
  readonly registry: string | null;
  close(): Promise<void>;
}

/**
 * The registry, opened once it exists (never created by a read-only exporter: a missing SQLite file is asked
 * for again at the next scrape, and `roboguide_registry_up` says 0 meanwhile).
 */
function registryOpener(flag: string | undefined, metrics: ExporterMetrics) {
  if (flag === 'none') return { display: null, get: () => Promise.resolve(null), close: async () => {} };
  const location = registryLocation(flag);
  let opened: Promise<CapacityRegistry> | null = null;
  return {
    display: location.path,
    get: async (): Promise<CapacityRegistry | null> => {
      if (opened === null) {
        if (!isPostgresLocation(location) && !existsSync(location.path)) return null;
        opened = openRegistryAt(location).then((r) => instrumentRegistry(r, metrics.registryCalls));
        opened.catch(() => (opened = null));
      }
      return opened.catch(() => null);
    },
    close: async () => {
      await (await opened?.catch(() => null))?.close();
    },
  };
}

export async function startExporter(options: ExporterOptions): Promise<RunningExporter> {
  const metrics = new ExporterMetrics();
  const registry = registryOpener(options.registryFlag, metrics);
  // A read of the registry each scrape: behind a stand-in so that a registry opened later is used from then on.
  let current: CapacityRegistry | null = null;
  const fs = new NodeFileSystem();
  const scan = new HostScan(
    {
      fs,
      host: procHostIdentity,
      storeAt: (dir) => new EvidenceStore(fs, dir),
      readStatus: (store, now) => readStatus(store, undefined, now, procHostIdentity),
      get registry() {
        return current;
      },
      logger: createStderrLogger([], { longRunning: true }),
    },
    options,
  );
  // Scrapes that overlap share one scan.
  let inFlight: Promise<string> | null = null;
  const render = async (): Promise<{ contentType: string; body: string }> => {
    inFlight ??= (async () => {
      try {
        const began = process.hrtime.bigint();
        current = await registry.get();
        const snapshot = await scan.scan(new Date());
        metrics.apply(snapshot, Number(process.hrtime.bigint() - began) / 1e9);
        return await metrics.register.metrics();
      } finally {
        inFlight = null;
      }
    })();
    return { contentType: metrics.register.contentType, body: await inFlight };
  };
  const listener = await startMetricsListener({
    host: options.host,
    port: options.port,
    token: options.token,
    render,
  });
  return {
    port: listener.port,
    registry: registry.display,
    close: async () => {
      await listener.close();
      await registry.close();
    },
  };
}
