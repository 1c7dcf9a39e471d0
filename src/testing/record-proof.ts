import { createHash } from 'node:crypto';
import { constants, readFileSync, statSync } from 'node:fs';
import { lstat, open, realpath } from 'node:fs/promises';
import { basename, dirname, isAbsolute, join } from 'node:path';
import type { ProcessIdentity } from '../core/process-identity.js';

/**
 * What a server record may make the sweep do, each action proven ours first: a record names a process, the
 * containers of a batch id and a folder, and the sweep acts only on
 * - a folder that is the record's work folder: a real folder (no link) of this user, closed to others, holding the
 *   kit's marker file (`.roboguide-testkit`, this user's, no link) with the record's token — only the kit writes it;
 * - the containers of the batch id that `serve` derives from that folder's data dir (serve's own label);
 * - a process that is still the recorded one (pid and start time), runs as this user, and is `serve` with the
 *   record's `--socket`.
 */

export const MARKER_FILE = '.roboguide-testkit';

/** A server the kit started, as recorded on disk until it is stopped (`<recordsDir>/<batchId>.json`). */
export interface ServerRecord {
  readonly owner: ProcessIdentity & { readonly host: string };
  readonly server: ProcessIdentity;
  readonly batchId: string;
  readonly socketPath: string;
  /** The temporary folder the kit made (deleted by the sweep); null when the caller gave the folder. */
  readonly tempWorkDir: string | null;
  /** The token of the kit's marker in the work folder (`dirname(socketPath)`). */
  readonly token: string;
}

/** serve's container label for a data dir: roboguide.batch = serve-<sha256(real path of the data dir)[:12]>. */
export function serveBatchIdOf(dataDir: string): string {
  return `serve-${createHash('sha256').update(dataDir).digest('hex').slice(0, 12)}`;
}

function uid(): number {
  return process.getuid?.() ?? -1;
}

function isIdentity(v: unknown): v is ProcessIdentity {
  const o = v as Partial<ProcessIdentity> | null;
  return (
    typeof o === 'object' &&
    o !== null &&
    Number.isInteger(o.pid) &&
    (o.pid ?? 0) > 1 &&
    (o.start_ticks === null || typeof o.start_ticks === 'string') &&
    (o.boot_id === null || typeof o.boot_id === 'string')
  );
}

/** The record's fields, typed, or the first one that is not as the kit writes it. */
export function parseServerRecord(v: unknown): ServerRecord | string {
  const r = v as Partial<ServerRecord> | null;
  if (typeof r !== 'object' || r === null) return 'not an object';
  if (!isIdentity(r.owner) || typeof r.owner.host !== 'string') return 'owner';
  if (!isIdentity(r.server) || r.server.start_ticks === null) return 'server';
  if (typeof r.batchId !== 'string' || !/^serve-[0-9a-f]{12}$/.test(r.batchId)) return 'batchId';
  if (typeof r.socketPath !== 'string' || !isAbsolute(r.socketPath) || basename(r.socketPath) !== 'api.sock')
    return 'socketPath';
  if (r.tempWorkDir !== null && r.tempWorkDir !== dirname(r.socketPath)) return 'tempWorkDir';
  if (typeof r.token !== 'string' || !/^[0-9a-f]{32}$/.test(r.token)) return 'token';
  return r as ServerRecord;
}

/**
 * Null when the record's work folder is proven the kit's (see above) and its batch id is serve's for it; else why
 * not. Never follows a link.
 */
export async function workDirProblem(record: ServerRecord): Promise<string | null> {
  const workDir = dirname(record.socketPath);
  const stat = await lstat(workDir).catch(() => null);
  if (stat === null) return `the work folder ${workDir} is gone`;
  if (!stat.isDirectory()) return `the work folder ${workDir} is a link or not a folder`;
  if (stat.uid !== uid()) return `the work folder ${workDir} is owned by uid ${stat.uid}, not by this user`;
  if ((stat.mode & 0o022) !== 0) return `the work folder ${workDir} is writable by others`;
  const marker = await open(join(workDir, MARKER_FILE), constants.O_RDONLY | constants.O_NOFOLLOW).catch(
    () => null,
  );
  if (marker === null) return `the work folder ${workDir} has no test kit marker`;
  try {
    const m = await marker.stat();
    if (!m.isFile() || m.uid !== uid() || m.size > 64) return `the marker in ${workDir} is not the kit's`;
    if ((await marker.readFile('utf8')) !== record.token)
      return `the marker in ${workDir} holds another token`;
  } finally {
    await marker.close();
  }
  const real = await realpath(workDir);
  const ids = [
    serveBatchIdOf(join(real, 'data')),
    serveBatchIdOf(await realpath(join(real, 'data')).catch(() => '')),
  ];
  return ids.includes(record.batchId) ? null : `the batch id ${record.batchId} is not serve's for ${workDir}`;
}

function readSync(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
}

/** Is this live process (checked for identity by the caller) our `serve` with this socket, run by this user? */
export function isOurServeProcess(pid: number, socketPath: string): boolean {
  const owner = (() => {
    try {
      return statSync(`/proc/${pid}`).uid;
    } catch {
      return null;
    }
  })();
  if (owner !== uid()) return false;
  const argv = readSync(`/proc/${pid}/cmdline`)?.split('\0') ?? [];
  const socket = argv.indexOf('--socket');
  return argv.includes('serve') && socket !== -1 && argv[socket + 1] === socketPath;
}
