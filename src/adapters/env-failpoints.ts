import { appendFileSync } from 'node:fs';
import { access, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { FailpointHooks } from '../app/ports/failpoints.js';

/**
 * Failpoints for crash tests, read from the environment of the process (the CLI installs them at start-up, see
 * composition-root.ts): `ROBOGUIDE_FAILPOINT=<name>[#<n>]` makes the process SIGKILL itself the n-th time (default
 * first) it passes the named point. `ROBOGUIDE_FAILPOINT_TRACE=<file>` appends the name of every point passed to
 * that file (one per line): the crash tests use it to enumerate the kill points of a batch.
 *
 * Pause points for engine-fault tests: with `ROBOGUIDE_PAUSEPOINT=<name>[#<n>]` and `ROBOGUIDE_PAUSEPOINT_DIR=<dir>`,
 * the n-th passage of the named point writes `<dir>/<name>.reached` and waits until `<dir>/<name>.go` exists (the
 * test does something to the world meanwhile, e.g. kills the engine).
 *
 * Null when none of these is set (production): the app's points stay cheap no-ops.
 */
export function failpointsFromEnvironment(
  env: Readonly<Record<string, string | undefined>>,
): FailpointHooks | null {
  const spec = env['ROBOGUIDE_FAILPOINT'] ?? '';
  const tracePath = env['ROBOGUIDE_FAILPOINT_TRACE'] ?? '';
  const pauseSpec = env['ROBOGUIDE_PAUSEPOINT'] ?? '';
  const pauseDir = env['ROBOGUIDE_PAUSEPOINT_DIR'] ?? '';
  if (spec === '' && tracePath === '' && (pauseSpec === '' || pauseDir === '')) return null;

  const hash = spec.lastIndexOf('#');
  const target = hash === -1 ? spec : spec.slice(0, hash);
  const nth = hash === -1 ? 1 : Number(spec.slice(hash + 1));
  let seen = 0;
  const [pauseTarget, pauseNthText] = pauseSpec.split('#');
  const pauseNth = pauseNthText === undefined ? 1 : Number(pauseNthText);
  let pauseSeen = 0;

  return {
    hit(name: string): void {
      if (tracePath !== '') appendFileSync(tracePath, `${name}\n`);
      if (target === '' || target !== name) return;
      seen++;
      if (seen === nth) process.kill(process.pid, 'SIGKILL');
    },
    async pause(name: string): Promise<void> {
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
    },
  };
}
