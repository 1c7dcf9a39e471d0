import { spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { RoboguideError } from '../core/errors.js';
import { type SupervisorRecord } from '../core/supervisor-record.js';
import { SUPERVISOR_FILE, SUPERVISOR_LOG } from '../core/evidence-names.js';

const IDENTITY_TIMEOUT_MS = 30_000;
/**
 * How often `e1-batch start` looks for the supervisor's identity: a read of one small file, so often enough that
 * the command returns within a few ms of it (it waited 25 ms on average at 50 ms, issue 39).
 */
const IDENTITY_POLL_MS = 10;

/**
 * Node flags of the detached supervisor (issue 39: its RSS flat over a batch). The supervisor allocates steadily over
 * hours while its live heap stays about 21–23 MiB; what grew was memory V8 keeps committed for the heap.
 * - A young generation of 4 MiB semi-spaces (V8's default grows them to 16 MiB and more, and keeps what it grew):
 *   101 → 235 MiB over 225 pairs with the default, 92 → 144 MiB with 4. Scavenges of 4 MiB cost well under 1 ms.
 * - `--optimize-for-size`: V8 grows the old generation's limit less and gives pages back sooner. Over 300 pairs the
 *   RSS went from 90 to 97 MiB (max 100) with it, 100 to 155 MiB without (docs/benchmarks.md, issue 39, seventh
 *   stop). Not accepted in NODE_OPTIONS, so a flag here.
 */
export const SUPERVISOR_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=4', '--optimize-for-size'];

function readIdentity(output: string): SupervisorRecord | null {
  try {
    return JSON.parse(readFileSync(join(output, SUPERVISOR_FILE), 'utf8')) as SupervisorRecord;
  } catch {
    return null;
  }
}

function tail(path: string, lines: number): string {
  try {
    return readFileSync(path, 'utf8').split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

/**
 * Start the supervisor detached: its own process group, output appended to D/supervisor.log, inheriting the
 * environment plus `extraEnv` (the referenced secrets are resolved inside it, never written; `extraEnv` carries a
 * PostgreSQL registry's password as PGPASSWORD, never written either). Returns once the supervisor has
 * written its identity; fails with the log's tail when it dies first.
 */
export async function launchSupervisor(
  binRunJs: string,
  output: string,
  mode: 'start' | 'resume',
  extraEnv: Readonly<Record<string, string>> = {},
): Promise<SupervisorRecord> {
  const logPath = join(output, SUPERVISOR_LOG);
  const fd = openSync(logPath, 'a', 0o600);
  const child = spawn(
    process.execPath,
    [...SUPERVISOR_NODE_FLAGS, binRunJs, 'e1-batch', 'supervise', '--output', output, '--mode', mode],
    {
      detached: true,
      stdio: ['ignore', fd, fd],
      env: { ...process.env, ...extraEnv },
    },
  );
  closeSync(fd);
  let exited: number | null = null;
  child.on('exit', (code) => (exited = code ?? -1));
  child.unref();
  const deadline = Date.now() + IDENTITY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    const identity = readIdentity(output);
    if (identity && identity.pid === child.pid) return identity;
    if (exited !== null) break;
    await new Promise((resolve) => setTimeout(resolve, IDENTITY_POLL_MS));
  }
  if (exited === null && child.pid !== undefined) {
    // Too slow to publish its identity: end it (its own process group) rather than leave one we reported as failed.
    try {
      process.kill(-child.pid, 'SIGTERM');
    } catch {
      // already gone
    }
  }
  throw new RoboguideError(
    'E_INTERNAL',
    `the supervisor did not start (exit ${exited ?? 'none'}); last lines of ${logPath}:\n${tail(logPath, 20)}`,
  );
}
