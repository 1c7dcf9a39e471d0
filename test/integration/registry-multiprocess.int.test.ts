/**
 * Several supervisor processes on one host admitting against one registry file at the same
 * time: the host limit is never exceeded. Children import the built registry from dist/
 * (the integration suite runs after `npm run build`).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';

const CHILDREN = 6;
const CHURN_ITERATIONS = 40;
const LIMIT = 2;
const DIST_MODULE = resolve('dist/adapters/registry/sqlite-capacity-registry.js');

/** Runs in each child: `hold` admits once and exits holding; `churn` admits, looks at what is held, releases. */
const CHILD_SCRIPT = `
const { SqliteCapacityRegistry } = await import(process.env.REGISTRY_MODULE);
const registry = SqliteCapacityRegistry.open({ path: process.env.REGISTRY_DB });
const child = process.env.CHILD_ID;
const out = { results: [], maxHeldSeen: 0, releaseFailures: 0 };
const iterations = process.env.CHILD_MODE === 'hold' ? 1 : Number(process.env.ITERATIONS);
for (let i = 0; i < iterations; i += 1) {
  const claimId = 'claim-' + child + '-' + i;
  const result = registry.admit({ batchId: 'batch-' + child, jobId: 'job-' + i, claimId, gpuMib: 0 });
  out.results.push(result);
  if (result.kind !== 'admitted') continue;
  for (let look = 0; look < 5; look += 1) out.maxHeldSeen = Math.max(out.maxHeldSeen, registry.held().length);
  if (process.env.CHILD_MODE === 'churn' && registry.release(result.reservationId, claimId).kind !== 'released') {
    out.releaseFailures += 1;
  }
}
registry.close();
process.stdout.write(JSON.stringify(out));
`;

interface ChildReport {
  readonly results: readonly { kind: string; reason?: string; held?: number; limit?: number }[];
  readonly maxHeldSeen: number;
  readonly releaseFailures: number;
}

let dir: string;
let dbPath: string;

function runChild(childId: number, mode: 'hold' | 'churn'): Promise<ChildReport> {
  const env = {
    ...process.env,
    REGISTRY_MODULE: pathToFileURL(DIST_MODULE).href,
    REGISTRY_DB: dbPath,
    CHILD_ID: String(childId),
    CHILD_MODE: mode,
    ITERATIONS: String(CHURN_ITERATIONS),
  };
  const args = ['--disable-warning=ExperimentalWarning', '--input-type=module', '-e', CHILD_SCRIPT];
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (code) => {
      if (code === 0) resolvePromise(JSON.parse(stdout) as ChildReport);
      else reject(new Error(`child ${childId} exited ${String(code)}: ${stderr}`));
    });
  });
}

function runChildren(mode: 'hold' | 'churn'): Promise<ChildReport[]> {
  return Promise.all(Array.from({ length: CHILDREN }, (_, childId) => runChild(childId, mode)));
}

beforeAll(() => {
  if (!existsSync(DIST_MODULE)) throw new Error(`${DIST_MODULE} is missing: run \`npm run build\` first`);
});

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'registry-mp-'));
  dbPath = join(dir, 'nested', 'registry.db');
});

afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('registry shared by several processes', () => {
  it('admits exactly the host limit when six processes race on a fresh file', async () => {
    const reports = await runChildren('hold');
    const results = reports.flatMap((report) => report.results);
    expect(results.filter((r) => r.kind === 'admitted')).toHaveLength(2);
    expect(results.filter((r) => r.kind === 'refused')).toEqual(
      Array(CHILDREN - 2).fill({ kind: 'refused', reason: 'host_full', held: 2, limit: 2 }),
    );
    using registry = SqliteCapacityRegistry.open({ path: dbPath });
    expect(registry.held()).toHaveLength(2);
    expect(registry.board()).toHaveLength(2);
  });

  it('never exceeds the limit while six processes admit and release concurrently', async () => {
    {
      using setup = SqliteCapacityRegistry.open({ path: dbPath });
      setup.setLimits({ maxReservations: LIMIT, gpuMib: null });
    }
    const reports = await runChildren('churn');
    const admittedCount = reports.flatMap((r) => r.results).filter((r) => r.kind === 'admitted').length;
    const refusals = reports.flatMap((r) => r.results).filter((r) => r.kind === 'refused');
    expect(Math.max(...reports.map((r) => r.maxHeldSeen))).toBeLessThanOrEqual(LIMIT);
    expect(reports.map((r) => r.releaseFailures)).toEqual(Array(CHILDREN).fill(0));
    for (const refusal of refusals)
      expect(refusal).toEqual({ kind: 'refused', reason: 'host_full', held: LIMIT, limit: LIMIT });
    expect(admittedCount + refusals.length).toBe(CHILDREN * CHURN_ITERATIONS);
    using registry = SqliteCapacityRegistry.open({ path: dbPath });
    expect(registry.held()).toEqual([]);
    expect(registry.board()).toHaveLength(admittedCount);
    console.info(
      `churn (limit ${LIMIT}): ${admittedCount} admitted, ${refusals.length} refused at the limit`,
    );
  });
});
