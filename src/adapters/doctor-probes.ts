/**
 * The real probes behind `doctor` (node:sqlite, statfs, /proc, nvidia-smi); the checks and verdicts are in
 * src/app/doctor.ts and take these through DoctorDeps.
 */
import { randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { access, mkdtemp, rm, statfs } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import type { DoctorDeps, RegistryTarget } from '../app/doctor.js';
import { readBootId } from './host-identity.js';
import { observeGpus } from './nvidia-smi.js';


const SCRATCH_TABLE = 'roboguide_doctor_scratch';

/** Opens (creating when missing) the database and proves a write + read inside a transaction that is rolled back. */
export function probeSqliteWritable(path: string): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const db = new DatabaseSync(path, { timeout: 2_000 });
  try {
    db.exec('BEGIN IMMEDIATE');
    try {
      db.exec(`CREATE TABLE ${SCRATCH_TABLE} (id INTEGER PRIMARY KEY, token TEXT NOT NULL)`);
      const token = randomUUID();
      db.prepare(`INSERT INTO ${SCRATCH_TABLE} (token) VALUES (?)`).run(token);
      const row = db.prepare(`SELECT token FROM ${SCRATCH_TABLE}`).get() as { token?: unknown } | undefined;
      if (row?.token !== token) throw new Error('the row read back differs from the row written');
    } finally {
      if (db.isTransaction) db.exec('ROLLBACK');
    }
  } finally {
    db.close();
  }
}

async function probeRegistry(target: RegistryTarget): Promise<void> {
  if (target.kind === 'file') return probeSqliteWritable(target.path);
  const dir = await mkdtemp(join(tmpdir(), 'roboguide-doctor-'));
  try {
    probeSqliteWritable(join(dir, 'registry.db'));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Free bytes for an unprivileged user on the file system of `path` (or its nearest existing ancestor). */
export async function freeDiskBytes(path: string): Promise<{ path: string; freeBytes: number }> {
  let current = resolve(path);
  for (;;) {
    try {
      const fs = await statfs(current);
      return { path: current, freeBytes: fs.bavail * fs.bsize };
    } catch (err) {
      const parent = dirname(current);
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || parent === current) throw err;
      current = parent;
    }
  }
}

export function createDoctorDeps(
  runtime: DoctorDeps['runtime'],
  options: { nvidiaSmiBinary?: string } = {},
): DoctorDeps {
  return {
    runtime,
    observeGpus: () =>
      observeGpus(options.nvidiaSmiBinary !== undefined ? { binary: options.nvidiaSmiBinary } : {}),
    fileExists: (path) =>
      access(path).then(
        () => true,
        () => false,
      ),
    probeRegistry,
    freeDiskBytes,
    readBootId,
    nowMs: () => Date.now(),
    newId: () => randomUUID().slice(0, 8),
  };
}
