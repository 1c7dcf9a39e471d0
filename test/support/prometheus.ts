/**
 * Debian's Prometheus (2.42) for tests: installed by the set-up when missing (apt, as root, idempotent: nothing is
 * done when the binary is there), started on loopback with a configuration of the test's own (its own storage in a
 * temporary folder, a free port), asked through its HTTP API, and stopped by pid at the teardown. Without the binary
 * and no way to install it the suite is skipped, unless REQUIRE_PROMETHEUS=1 (CI), where it fails.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { until } from './until.js';

export const PROMETHEUS = process.env['ROBOGUIDE_PROMETHEUS_BIN'] ?? '/usr/bin/prometheus';
export const PROMTOOL = '/usr/bin/promtool';

function aptInstall(pkg: string): boolean {
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const install = (): boolean =>
    spawnSync('apt-get', ['install', '-y', '-q', '--no-install-recommends', pkg], { env, stdio: 'ignore' })
      .status === 0;
  if (install()) return true;
  spawnSync('apt-get', ['update', '-q'], { env, stdio: 'ignore' });
  return install();
}

/** Why Prometheus cannot run here (after trying to install it as root), or null when it can. */
export function prometheusSkipReason(): string | null {
  if (!existsSync(PROMETHEUS) && process.getuid?.() === 0) aptInstall('prometheus');
  const reason = existsSync(PROMETHEUS) ? null : `no ${PROMETHEUS} (apt-get install prometheus, as root)`;
  if (reason !== null && process.env['REQUIRE_PROMETHEUS'] === '1')
    throw new Error(`REQUIRE_PROMETHEUS=1 but Prometheus cannot run: ${reason}`);
  return reason;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export interface ScrapeTarget {
  readonly job: string;
  readonly port: number;
  /** A file holding the bearer token Prometheus sends. */
  readonly tokenFile?: string;
}

export interface Sample {
  readonly metric: Record<string, string>;
  readonly value: number;
}

export interface TestPrometheus {
  readonly port: number;
  /** An instant query through /api/v1/query. */
  query(expr: string): Promise<Sample[]>;
  /** Waits until `expr` has a sample that `accept` takes (default: any), and returns every sample. */
  waitFor(expr: string, accept?: (samples: Sample[]) => boolean, timeoutMs?: number): Promise<Sample[]>;
  stop(): Promise<void>;
}

/** One Prometheus scraping `targets` every second, on 127.0.0.1 at a free port, its data in a temporary folder. */
export async function startPrometheus(targets: readonly ScrapeTarget[]): Promise<TestPrometheus> {
  const dir = await mkdtemp(join(tmpdir(), 'rg-prometheus-'));
  const scrape = targets.map((t) =>
    [
      `  - job_name: ${t.job}`,
      '    scrape_interval: 1s',
      '    scrape_timeout: 1s',
      ...(t.tokenFile !== undefined
        ? ['    authorization:', '      type: Bearer', `      credentials_file: ${t.tokenFile}`]
        : []),
      '    static_configs:',
      `      - targets: ['127.0.0.1:${t.port}']`,
    ].join('\n'),
  );
  const config = join(dir, 'prometheus.yml');
  await writeFile(config, ['global:', '  scrape_interval: 1s', 'scrape_configs:', ...scrape, ''].join('\n'));
  const port = await freePort();
  let log = '';
  const child: ChildProcess = spawn(
    PROMETHEUS,
    [
      `--config.file=${config}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  child.stderr?.setEncoding('utf8').on('data', (c: string) => (log = (log + c).slice(-20_000)));
  const base = `http://127.0.0.1:${port}`;
  const query = async (expr: string): Promise<Sample[]> => {
    const res = await fetch(`${base}/api/v1/query?query=${encodeURIComponent(expr)}`);
    const body = (await res.json()) as {
      status: string;
      error?: string;
      data?: { result: { metric: Record<string, string>; value: [number, string] }[] };
    };
    if (body.status !== 'success') throw new Error(`query ${expr}: ${body.error ?? res.status}`);
    return (body.data?.result ?? []).map((r) => ({ metric: r.metric, value: Number(r.value[1]) }));
  };
  try {
    await until(
      async () => ((await fetch(`${base}/-/ready`).catch(() => null))?.ok === true ? true : undefined),
      `prometheus ready on ${port}`,
      { timeoutMs: 30_000, ignoreErrors: true },
    );
  } catch (err) {
    child.kill('SIGKILL');
    throw new Error(`${(err as Error).message}\n${log}`, { cause: err });
  }
  return {
    port,
    query,
    waitFor: (expr, accept = (s) => s.length > 0, timeoutMs = 60_000) =>
      until(
        async () => {
          const samples = await query(expr);
          return accept(samples) ? samples : undefined;
        },
        `prometheus: ${expr}`,
        { timeoutMs, intervalMs: 500 },
      ),
    stop: async () => {
      if (child.exitCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGTERM');
        await exited;
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}
