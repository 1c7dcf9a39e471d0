// One admission + its release through the registry port: PostgreSQL (a throwaway server on a Unix socket, started
// here as the postgres user, as the tests do) against SQLite (a file), alternating runs in one process.
// Prints the median ms per admit+release of each and the ratio PostgreSQL/SQLite, then the same under 8
// concurrent admitters (8 registries, one connection each, each admitting and releasing in a loop).
// Needs root (runuser) and Debian's postgresql 15 binaries. Usage: npx node bench/registry.bench.js [ops] [runs]
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { parsePostgresUrl } from '../dist/adapters/registry/default-path.js';
import { PostgresCapacityRegistry } from '../dist/adapters/registry/postgres-capacity-registry.js';
import { SqliteCapacityRegistry } from '../dist/adapters/registry/sqlite-capacity-registry.js';
import { elapsedMsSince, median } from './support.js';

const OPS = Number(process.argv[2] ?? 200);
const RUNS = Number(process.argv[3] ?? 5);
const CONCURRENT = 8;
const PG_BIN = '/usr/lib/postgresql/15/bin';

function asPostgres(command, args) {
  return execFileSync('runuser', ['-u', 'postgres', '--', join(PG_BIN, command), ...args], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

const root = mkdtempSync(join(tmpdir(), 'rg-bench-pg-'));
const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
chmodSync(root, 0o711);
chownSync(root, uid, gid);
const dataDir = join(root, 'data');
asPostgres('initdb', ['-D', dataDir, '-A', 'trust', '-U', 'postgres', '--no-sync']);
// fsync on, as a real server would run (the SQLite side runs synchronous = FULL).
asPostgres('pg_ctl', [
  '-D',
  dataDir,
  '-l',
  join(root, 'server.log'),
  '-o',
  `-k ${root} -c listen_addresses=''`,
  '-w',
  'start',
]);

let counter = 0;
async function freshPostgres() {
  const name = `bench_${counter++}`;
  const admin = new pg.Client({ host: root, user: 'postgres', database: 'postgres' });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const location = parsePostgresUrl(`postgres://postgres@/${name}?host=${root}`);
  return () =>
    PostgresCapacityRegistry.open({
      connection: location.connection,
      display: location.path,
      localNode: 'bench',
    });
}

function freshSqlite() {
  const path = join(mkdtempSync(join(tmpdir(), 'rg-bench-sqlite-')), 'registry.db');
  return async () => SqliteCapacityRegistry.open({ path, localNode: 'bench' });
}

/** ms per admit+release, `workers` registries each doing `ops / workers` in a loop at once. */
async function timeOps(open, workers) {
  const first = await open();
  await first.setLimits({ maxReservations: 1000, gpuMib: null });
  const registries = [first, ...(await Promise.all(Array.from({ length: workers - 1 }, () => open())))];
  const per = Math.floor(OPS / workers);
  const started = process.hrtime.bigint();
  await Promise.all(
    registries.map(async (registry, w) => {
      for (let i = 0; i < per; i++) {
        const claimId = `c-${w}-${i}-${counter}`;
        const admitted = await registry.admit({
          batchId: `b${w}`,
          jobId: `j${i}`,
          claimId,
          gpuMib: 0,
          ports: [20_000 + w],
        });
        if (admitted.kind !== 'admitted') throw new Error(`not admitted: ${JSON.stringify(admitted)}`);
        await registry.release(admitted.reservationId, claimId);
      }
    }),
  );
  const ms = elapsedMsSince(started) / (per * workers);
  for (const registry of registries) await registry.close();
  return ms;
}

try {
  for (const workers of [1, CONCURRENT]) {
    const pgMs = [];
    const sqliteMs = [];
    await timeOps(await freshPostgres(), workers); // warm-up
    await timeOps(freshSqlite(), workers);
    for (let run = 0; run < RUNS; run++) {
      pgMs.push(await timeOps(await freshPostgres(), workers));
      sqliteMs.push(await timeOps(freshSqlite(), workers));
    }
    const p = median(pgMs);
    const s = median(sqliteMs);
    console.log(
      `${workers} admitter(s), ${OPS} admit+release each run, ${RUNS} runs: PostgreSQL median ${p.toFixed(2)} ms/op, SQLite median ${s.toFixed(2)} ms/op, ratio PostgreSQL/SQLite ${(p / s).toFixed(2)}`,
    );
  }
} finally {
  try {
    asPostgres('pg_ctl', ['-D', dataDir, '-m', 'fast', '-w', 'stop']);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}
