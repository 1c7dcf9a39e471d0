/**
 * What replaces testcontainers' reaper (Ryuk) where its image cannot be pulled, and what Ryuk never covers (the
 * containers a `serve` process creates): every container and server the kit starts is labelled or recorded with
 * its owner — the test process (host, boot id, pid and start time) — and the next run's sweep removes what belongs
 * to an owner that is gone. A live owner's containers are never touched, so parallel suites on one engine are safe.
 */
import { mkdir, readdir, readFile, rm, unlink, writeFile } from 'node:fs/promises';
import { hostname, tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { DockerContainerRuntime } from '../adapters/docker/docker-container-runtime.js';
import {
  currentProcessIdentity,
  isSameProcessAliveSync,
  type ProcessIdentity,
} from '../adapters/host-identity.js';

/** Label on every container the kit starts itself (its value: the kind, e.g. `pair-driver`). */
export const TESTKIT_LABEL = 'roboguide.testkit';
/** Label naming the test process that owns a container (JSON of {@link TestKitOwner}). */
export const TESTKIT_OWNER_LABEL = 'roboguide.testkit.owner';

export interface TestKitOwner extends ProcessIdentity {
  readonly host: string;
}

/** A server the kit started, as recorded on disk until it is stopped (`<recordsDir>/<batchId>.json`). */
interface ServerRecord {
  readonly owner: TestKitOwner;
  readonly server: ProcessIdentity;
  readonly batchId: string;
  readonly socketPath: string;
  /** The temporary folder the kit made (deleted by the sweep); null when the caller gave the folder. */
  readonly tempWorkDir: string | null;
}

export interface SweepReport {
  /** Containers removed (their absence confirmed by the engine). */
  readonly containers: string[];
  /** Batch ids of the servers whose leftovers were cleared. */
  readonly servers: string[];
}

/** Folder of the server records of this user (one file per running server). */
export function serverRecordsDir(): string {
  return join(tmpdir(), `roboguide-testkit-${userInfo().uid}`, 'servers');
}

let owner: Promise<TestKitOwner> | undefined;
/** This test process, as the owner recorded on what it starts. */
export function testKitOwner(): Promise<TestKitOwner> {
  owner ??= currentProcessIdentity().then((id) => ({ ...id, host: hostname() }));
  return owner;
}

/**
 * Is the owner gone? Only ever true for an owner on this host: a container owned by another machine's process
 * (a shared remote engine) is left alone. Without /proc (not Linux) a pid that still answers signal 0 counts as
 * alive.
 */
function ownerGone(o: TestKitOwner): boolean {
  if (o.host !== hostname()) return false;
  if (o.start_ticks === null) {
    try {
      process.kill(o.pid, 0);
      return false;
    } catch (err) {
      return (err as NodeJS.ErrnoException).code === 'ESRCH';
    }
  }
  return !isSameProcessAliveSync(o);
}

function parseOwner(text: string | undefined): TestKitOwner | null {
  if (text === undefined) return null;
  try {
    const o = JSON.parse(text) as Partial<TestKitOwner>;
    if (typeof o.host !== 'string' || typeof o.pid !== 'number') return null;
    return { host: o.host, pid: o.pid, start_ticks: o.start_ticks ?? null, boot_id: o.boot_id ?? null };
  } catch {
    return null;
  }
}

/** Remove each container and confirm the engine's 404; throws naming any that is still there. */
export async function removeVerified(
  ids: readonly string[],
  runtime = new DockerContainerRuntime(),
): Promise<void> {
  await Promise.all(ids.map((id) => runtime.remove(id)));
  const still: string[] = [];
  for (const id of ids) if ((await runtime.inspect(id)) !== null) still.push(id);
  if (still.length > 0)
    throw new Error(`the engine still has containers after their removal: ${still.join(', ')}`);
}

export async function writeServerRecord(record: ServerRecord): Promise<string> {
  const dir = serverRecordsDir();
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const path = join(dir, `${record.batchId}.json`);
  await writeFile(path, JSON.stringify(record), { mode: 0o600 });
  return path;
}

export async function deleteServerRecord(path: string): Promise<void> {
  await unlink(path).catch(() => undefined);
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** A server whose owner died is still running (only the owner was killed): SIGTERM lets it delete its sessions. */
async function endOrphanedServer(server: ProcessIdentity): Promise<void> {
  if (!isSameProcessAliveSync(server)) return;
  process.kill(server.pid, 'SIGTERM');
  const deadline = Date.now() + 30_000;
  while (isSameProcessAliveSync(server) && Date.now() < deadline) await sleep(100);
  if (isSameProcessAliveSync(server)) process.kill(server.pid, 'SIGKILL');
}

/**
 * Remove what test processes that are gone left behind: containers labelled with a dead owner, and the servers
 * (their process, their containers, their temporary folder) recorded by a dead owner. Runs by itself once per
 * process, at the first `PairDriverContainer.start()` or `RoboguideServer.start()`; call it from a global set-up
 * to clean up before anything starts.
 */
export async function sweepTestKitLeftovers(runtime = new DockerContainerRuntime()): Promise<SweepReport> {
  const removed: string[] = [];
  const servers: string[] = [];
  const dir = serverRecordsDir();
  const files = await readdir(dir).catch(() => [] as string[]);
  for (const file of files.filter((f) => f.endsWith('.json'))) {
    const path = join(dir, file);
    let record: ServerRecord;
    try {
      record = JSON.parse(await readFile(path, 'utf8')) as ServerRecord;
    } catch {
      continue; // being written, or not ours
    }
    if (!ownerGone(record.owner)) continue;
    await endOrphanedServer(record.server);
    const ids = (await runtime.listByLabel({ 'roboguide.batch': record.batchId })).map((c) => c.id);
    await removeVerified(ids, runtime);
    removed.push(...ids);
    if (record.tempWorkDir !== null) await rm(record.tempWorkDir, { recursive: true, force: true });
    await deleteServerRecord(path);
    servers.push(record.batchId);
  }
  const labelled = await runtime.listByLabel({ [TESTKIT_OWNER_LABEL]: '' });
  const orphans = labelled.filter((c) => {
    const o = parseOwner(c.labels[TESTKIT_OWNER_LABEL]);
    return o !== null && ownerGone(o);
  });
  await removeVerified(
    orphans.map((c) => c.id),
    runtime,
  );
  removed.push(...orphans.map((c) => c.id));
  return { containers: removed, servers };
}

let swept: Promise<SweepReport> | undefined;
/** The sweep, once per process (later calls share the first one's result). */
export function sweepOnce(): Promise<SweepReport> {
  swept ??= sweepTestKitLeftovers();
  return swept;
}
