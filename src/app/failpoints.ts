import { appendFileSync } from 'node:fs';

/**
 * Failpoints for crash tests: `ROBOGUIDE_FAILPOINT=<name>[#<n>]` makes the process SIGKILL itself the n-th time
 * (default first) it passes the named point. `ROBOGUIDE_FAILPOINT_TRACE=<file>` appends the name of every point
 * passed to that file (one per line): the crash tests use it to enumerate the kill points of a batch. Unset in
 * production, where every call is a cheap no-op.
 *
 * Names: the supervisor's own steps (`after_reserve`, `after_claim`, …) and one pair per write site, passed just
 * before and just after the write becomes durable: `write:<file>:temp_written|renamed`,
 * `publish:<file>:temp_written|linked`, `journal:<event type>` (after the fsync), `log_opened:<file>`, and
 * `registry:<operation>:in_txn|committed` (inside the transaction before COMMIT, and after it).
 */
const spec = process.env['ROBOGUIDE_FAILPOINT'] ?? '';
const tracePath = process.env['ROBOGUIDE_FAILPOINT_TRACE'] ?? '';
const hash = spec.lastIndexOf('#');
const target = hash === -1 ? spec : spec.slice(0, hash);
const nth = hash === -1 ? 1 : Number(spec.slice(hash + 1));
let seen = 0;

export function failpoint(name: string): void {
  if (tracePath !== '') appendFileSync(tracePath, `${name}\n`);
  if (target === '' || target !== name) return;
  seen++;
  if (seen === nth) process.kill(process.pid, 'SIGKILL');
}
