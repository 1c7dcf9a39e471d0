/**
 * What replaces testcontainers' reaper (Ryuk) where its image cannot be pulled, and what Ryuk never covers (the
 * containers a `serve` process creates): every container and server the kit starts is labelled or recorded with
 * its owner — the test process (host, boot id, pid and start time) — and the next run's sweep removes what belongs
 * to an owner that is gone. A live owner's containers are never touched, so parallel suites on one engine are safe.
 */
import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { open, readdir, rm, unlink, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { DockerContainerRuntime } from '../adapters/docker/docker-container-runtime.js';
import { currentProcessIdentity, isSameProcessAliveSync } from '../adapters/host-identity.js';
import type { ProcessIdentity } from '../core/process-identity.js';
import {
  isOurServeProcess,
  MARKER_FILE,
  parseServerRecord,
  workDirProblem,
  type ServerRecord,
} from './record-proof.js';
import { checkedRecordsDir } from './state-dir.js';

/** Label on every container the kit starts itself (its value: the kind, e.g. `pair-driver`). */
export const TESTKIT_LABEL = 'roboguide.testkit';
/** Label naming the test process that owns a container (JSON of {@link TestKitOwner}). */
export const TESTKIT_OWNER_LABEL = 'roboguide.testkit.owner';

export interface TestKitOwner extends ProcessIdentity {
  readonly host: string;
}

export interface SweepReport {
  /** Containers removed (their absence confirmed by the engine). */
  readonly containers: string[];
  /** Batch ids of the servers whose leftovers were cleared. */
  readonly servers: string[];
  /** Records the sweep did not act on, each with why (a field not as the kit writes it, a folder not proven ours). */
  readonly refused: { readonly record: string; readonly reason: string }[];
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

/** Writes the record into the checked state folder (TestKitStateError when it is not provably ours). */
export async function writeServerRecord(record: ServerRecord): Promise<string> {
  const dir = (await checkedRecordsDir('create')) as string;
  const path = join(dir, `${record.batchId}.json`);
  await writeFile(path, JSON.stringify(record), {
    mode: 0o600,
    flag: constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW,
  });
  return path;
}

/** The kit's marker in a work folder it uses (`record-proof.ts`): a fresh token, 0600, never through a link. */
export async function writeWorkDirMarker(workDir: string): Promise<string> {
  const token = randomBytes(16).toString('hex');
  await writeFile(join(workDir, MARKER_FILE), token, {
    mode: 0o600,
    flag: constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW,
  });
  return token;
}

export async function deleteServerRecord(path: string): Promise<void> {
  await unlink(path).catch(() => undefined);
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A server whose owner died is still running (only the owner was killed): SIGTERM lets it delete its sessions.
 * Signalled only while it is still the recorded process (pid and start time) and our `serve` with the record's
 * socket, run by this user (isOurServeProcess): a record never makes the sweep signal anything else.
 */
async function endOrphanedServer(server: ProcessIdentity, socketPath: string): Promise<void> {
  const ours = (): boolean => isSameProcessAliveSync(server) && isOurServeProcess(server.pid, socketPath);
  if (!ours()) return;
  process.kill(server.pid, 'SIGTERM');
  const deadline = Date.now() + 30_000;
  while (ours() && Date.now() < deadline) await sleep(100);
  if (ours()) process.kill(server.pid, 'SIGKILL');
}

/** The record in `path` (a regular file of this user, never through a link), or why it is not acted on. */
async function readRecord(path: string): Promise<ServerRecord | string | null> {
  let text: string;
  try {
    const handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    try {
      const stat = await handle.stat();
      if (!stat.isFile() || stat.uid !== process.getuid?.()) return 'not a file of this user';
      text = await handle.readFile('utf8');
    } finally {
      await handle.close();
    }
  } catch {
    return 'unreadable (a link, or not a file)';
  }
  try {
    const parsed = parseServerRecord(JSON.parse(text));
    return typeof parsed === 'string' ? `its field ${parsed} is not as the kit writes it` : parsed;
  } catch {
    return null; // being written
  }
}

/** The leftovers of one record whose owner is gone, each action proven ours first (record-proof.ts). */
async function sweepRecord(
  path: string,
  record: ServerRecord,
  runtime: DockerContainerRuntime,
): Promise<string[] | string> {
  const problem = await workDirProblem(record);
  if (problem !== null) return problem;
  await endOrphanedServer(record.server, record.socketPath);
  const ids = (await runtime.listByLabel({ 'roboguide.batch': record.batchId })).map((c) => c.id);
  await removeVerified(ids, runtime);
  if (record.tempWorkDir !== null) await rm(record.tempWorkDir, { recursive: true, force: true });
  await deleteServerRecord(path);
  return ids;
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
  const refused: { record: string; reason: string }[] = [];
  // A state folder that is not provably ours: TestKitStateError, before anything is read or done.
  const dir = await checkedRecordsDir('absent');
  const files = dir === null ? [] : await readdir(dir);
  for (const file of files.filter((f) => f.endsWith('.json'))) {
    const path = join(dir as string, file);
    const record = await readRecord(path);
    if (record === null) continue;
    if (typeof record === 'string') {
      refused.push({ record: path, reason: record });
      continue;
    }
    if (!ownerGone(record.owner)) continue;
    const swept = await sweepRecord(path, record, runtime);
    if (typeof swept === 'string') {
      refused.push({ record: path, reason: swept });
      continue;
    }
    removed.push(...swept);
    servers.push(record.batchId);
  }
  const labelled = await runtime.listByLabel({ [TESTKIT_OWNER_LABEL]: '' });
  const orphans = labelled.filter((c) => {
    // Only containers the kit labelled as its own (the kind label too), whose recorded owner is gone.
    if (c.labels[TESTKIT_LABEL] === undefined) return false;
    const o = parseOwner(c.labels[TESTKIT_OWNER_LABEL]);
    return o !== null && ownerGone(o);
  });
  await removeVerified(
    orphans.map((c) => c.id),
    runtime,
  );
  removed.push(...orphans.map((c) => c.id));
  return { containers: removed, servers, refused };
}

let swept: Promise<SweepReport> | undefined;
/** The sweep, once per process (later calls share the first one's result). */
export function sweepOnce(): Promise<SweepReport> {
  swept ??= sweepTestKitLeftovers();
  return swept;
}
