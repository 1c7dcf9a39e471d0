/**
 * Several supervisor processes admitting against one registry at the same time, for each backend: a SQLite file
 * on one host, and a PostgreSQL database (as hosts sharing it would). The limit is never exceeded: 20 processes
 * racing admit exactly the limit (no lost update), and six processes admitting and releasing in a loop never see
 * more than the limit held. Children import the built registry from dist/ (the integration suite runs after
 * `npm run build`) and open it the way every command does, from the `--registry` value.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { registryLocation } from '../../src/adapters/registry/default-path.js';
import { openRegistryAt } from '../../src/adapters/registry/open-registry.js';
import { postgresSkipReason, startPostgres, type TestPostgres } from '../support/postgres.js';

const RACERS = 20;
const RACE_LIMIT = 7;
const CHURNERS = 6;
const CHURN_ITERATIONS = 40;
const LIMIT = 2;
const OPEN_MODULE = resolve('dist/adapters/registry/open-registry.js');
const LOCATION_MODULE = resolve('dist/adapters/registry/default-path.js');

/** Runs in each child: `hold` admits once and exits holding; `churn` admits, looks at what is held, releases. */
const CHILD_SCRIPT = `
const { openRegistryAt } = await import(process.env.OPEN_MODULE);
const { registryLocation } = await import(process.env.LOCATION_MODULE);
const registry = await openRegistryAt(registryLocation(process.env.REGISTRY));
const child = process.env.CHILD_ID;
const out = { results: [], maxHeldSeen: 0, releaseFailures: 0 };
const iterations = process.env.CHILD_MODE === 'hold' ? 1 : Number(process.env.ITERATIONS);
for (let i = 0; i < iterations; i += 1) {
  const claimId = 'claim-' + child + '-' + i;
  const result = await registry.admit({ batchId: 'batch-' + child, jobId: 'job-' + i, claimId, gpuMib: 0, node: 'shared-node' });
  out.results.push(result);
  if (result.kind !== 'admitted') continue;
  for (let look = 0; look < 5; look += 1) out.maxHeldSeen = Math.max(out.maxHeldSeen, (await registry.held()).length);
  if (process.env.CHILD_MODE === 'churn' && (await registry.release(result.reservationId, claimId)).kind !== 'released') {
    out.releaseFailures += 1;
  }
}
await registry.close();
process.stdout.write(JSON.stringify(out));
`;

interface ChildReport {
  readonly results: readonly {
    kind: string;
    reason?: string;
    held?: number;
    limit?: number;
    node?: string;
  }[];
  readonly maxHeldSeen: number;
  readonly releaseFailures: number;
}

function runChild(registry: string, childId: number, mode: 'hold' | 'churn'): Promise<ChildReport> {
  const env = {
    ...process.env,
    OPEN_MODULE: pathToFileURL(OPEN_MODULE).href,
    LOCATION_MODULE: pathToFileURL(LOCATION_MODULE).href,
    REGISTRY: registry,
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

function runChildren(registry: string, count: number, mode: 'hold' | 'churn'): Promise<ChildReport[]> {
  return Promise.all(Array.from({ length: count }, (_, childId) => runChild(registry, childId, mode)));
}

async function setLimit(registry: string, maxReservations: number): Promise<void> {
  const opened = await openRegistryAt(registryLocation(registry));
  try {
    await opened.setLimits({ maxReservations, gpuMib: null }, 'shared-node');
  } finally {
    await opened.close();
  }
}

beforeAll(() => {
  for (const module of [OPEN_MODULE, LOCATION_MODULE]) {
    if (!existsSync(module)) throw new Error(`${module} is missing: run \`npm run build\` first`);
  }
});

interface Backend {
  readonly name: string;
  /** A fresh registry (`--registry` value) for one test. */
  fresh(): Promise<string>;
}

function multiprocessSuite(backend: Backend): void {
  describe(`registry shared by several processes (${backend.name})`, () => {
    it(`admits exactly the limit when ${RACERS} processes race (no lost update)`, async () => {
      const registry = await backend.fresh();
      await setLimit(registry, RACE_LIMIT);
      const reports = await runChildren(registry, RACERS, 'hold');
      const results = reports.flatMap((report) => report.results);
      const admitted = results.filter((r) => r.kind === 'admitted').length;
      expect(admitted).toBe(RACE_LIMIT);
      expect(results.filter((r) => r.kind === 'refused')).toEqual(
        Array(RACERS - RACE_LIMIT).fill({
          kind: 'refused',
          reason: 'host_full',
          held: RACE_LIMIT,
          limit: RACE_LIMIT,
          node: 'shared-node',
        }),
      );
      const opened = await openRegistryAt(registryLocation(registry));
      try {
        expect(await opened.held()).toHaveLength(RACE_LIMIT);
        expect(await opened.board()).toHaveLength(RACE_LIMIT);
      } finally {
        await opened.close();
      }
      console.info(
        `${backend.name}: ${RACERS} racing processes, limit ${RACE_LIMIT}: ${admitted} admitted, ${RACERS - admitted} refused`,
      );
    });

    it(`never exceeds the limit while ${CHURNERS} processes admit and release concurrently`, async () => {
      const registry = await backend.fresh();
      await setLimit(registry, LIMIT);
      const reports = await runChildren(registry, CHURNERS, 'churn');
      const admittedCount = reports.flatMap((r) => r.results).filter((r) => r.kind === 'admitted').length;
      const refusals = reports.flatMap((r) => r.results).filter((r) => r.kind === 'refused');
      expect(Math.max(...reports.map((r) => r.maxHeldSeen))).toBeLessThanOrEqual(LIMIT);
      expect(reports.map((r) => r.releaseFailures)).toEqual(Array(CHURNERS).fill(0));
      for (const refusal of refusals)
        expect(refusal).toEqual({
          kind: 'refused',
          reason: 'host_full',
          held: LIMIT,
          limit: LIMIT,
          node: 'shared-node',
        });
      expect(admittedCount + refusals.length).toBe(CHURNERS * CHURN_ITERATIONS);
      const opened = await openRegistryAt(registryLocation(registry));
      try {
        expect(await opened.held()).toEqual([]);
        expect(await opened.board()).toHaveLength(admittedCount);
      } finally {
        await opened.close();
      }
      console.info(
        `${backend.name} churn (limit ${LIMIT}): ${admittedCount} admitted, ${refusals.length} refused at the limit`,
      );
    });
  });
}

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'registry-mp-'));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

let sqliteCounter = 0;
multiprocessSuite({
  name: 'SQLite',
  fresh: () => Promise.resolve(join(dir, `registry-${sqliteCounter++}.db`)),
});

const skip = postgresSkipReason();
if (skip === null) {
  let server: TestPostgres | null = null;
  let counter = 0;
  beforeAll(() => {
    server = startPostgres();
  });
  afterAll(() => server?.stop());
  multiprocessSuite({ name: 'PostgreSQL', fresh: () => server!.createDatabase(`multiprocess_${counter++}`) });
} else {
  describe.skip(`registry shared by several processes (PostgreSQL): ${skip}`, () => {
    it('needs PostgreSQL', () => undefined);
  });
}
