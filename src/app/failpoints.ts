import { appendFileSync } from 'node:fs';
import { access, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

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

/**
 * Pause points for engine-fault tests: with `ROBOGUIDE_PAUSEPOINT=<name>[#<n>]` and `ROBOGUIDE_PAUSEPOINT_DIR=<dir>`,
 * the n-th passage of the named point writes `<dir>/<name>.reached` and waits until `<dir>/<name>.go` exists (the
 * test does something to the world meanwhile, e.g. kills the engine). Unset, it returns at once.
 */
const pauseSpec = process.env['ROBOGUIDE_PAUSEPOINT'] ?? '';
const pauseDir = process.env['ROBOGUIDE_PAUSEPOINT_DIR'] ?? '';
const [pauseTarget, pauseNthText] = pauseSpec.split('#');
const pauseNth = pauseNthText === undefined ? 1 : Number(pauseNthText);
let pauseSeen = 0;

export async function pausepoint(name: string): Promise<void> {
  if (pauseTarget === undefined || pauseTarget === '' || pauseTarget !== name || pauseDir === '') return;
  pauseSeen++;
  if (pauseSeen !== pauseNth) return;
  await writeFile(join(pauseDir, `${name}.reached`), `${process.pid}\n`);
  for (;;) {
    const released = await access(join(pauseDir, `${name}.go`)).then(
      () => true,
      () => false,
    );
    if (released) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
