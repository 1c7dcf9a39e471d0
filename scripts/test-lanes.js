#!/usr/bin/env node
// `npm test` (after its pretest): the whole suite in two vitest processes side by side. One runs the unit tests and
// the `integration` project, the other the `integration-services` project (vitest.config.ts: the integration files
// that bring services of their own); each runs its integration files one at a time. Vitest itself runs every
// project whose files go one at a time in a single queue, so two lanes take two processes.
//
// The second lane's output goes to .test-services.log and is printed whole when both are done; a JSON report asked
// for with `--outputFile.json=F` is written for it to F with `-services` before `.json`. The exit status is the first
// non-zero one of the two.
//
// Only `--reporter=…` and `--outputFile.json=…` are taken this way: any other argument (a file filter, `--project`,
// `-t`, another report file, which both lanes would write) runs one vitest as given, every project in one queue.
import { spawn, spawnSync } from 'node:child_process';
import { createWriteStream, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const VITEST = join(ROOT, 'node_modules', 'vitest', 'vitest.mjs');
const SERVICES_LOG = '.test-services.log';
const args = process.argv.slice(2);
const lanesApply = args.every((a) => /^--(reporter|outputFile\.json)=/.test(a));

if (!lanesApply) {
  const run = spawnSync(process.execPath, [VITEST, 'run', ...args], { stdio: 'inherit', cwd: ROOT });
  process.exit(run.status ?? 1);
}

ensureFreshBuild();
const servicesArgs = args.map((a) =>
  a.replace(/^(--outputFile\.json=)(.*?)(\.json)?$/, (_m, flag, path) => `${flag}${path}-services.json`),
);
const log = createWriteStream(join(ROOT, SERVICES_LOG));
await new Promise((resolve, reject) => log.once('open', resolve).once('error', reject));
const services = spawn(
  process.execPath,
  [VITEST, 'run', '--project', 'integration-services', ...servicesArgs],
  { stdio: ['ignore', log, log], cwd: ROOT },
);
const main = spawn(
  process.execPath,
  [VITEST, 'run', '--project', 'unit', '--project', 'integration', ...args],
  { stdio: 'inherit', cwd: ROOT },
);
// Ctrl-C reaches both vitests from the terminal (one process group): a second SIGINT from here would make each skip
// its clean-up (containers left behind), so SIGINT only waits for them. SIGTERM, sent to this process alone, is passed
// on.
process.on('SIGINT', () => undefined);
process.on('SIGTERM', () => {
  for (const child of [main, services]) child.kill('SIGTERM');
});
const [mainStatus, servicesStatus] = await Promise.all([exitOf(main), exitOf(services)]);
log.end();
process.stdout.write(
  `\n--- integration-services lane (exit ${servicesStatus}; its log: ${SERVICES_LOG}) ---\n` +
    readFileSync(join(ROOT, SERVICES_LOG), 'utf8'),
);
process.exit(mainStatus !== 0 ? mainStatus : servicesStatus);

function exitOf(child) {
  return new Promise((resolve) => {
    child.once('error', () => resolve(1));
    child.once('exit', (code, signal) => resolve(code ?? (signal ? 128 : 1)));
  });
}

function newestMtimeMs(dir) {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestMtimeMs(path) : statSync(path).mtimeMs);
  }
  return newest;
}

/**
 * The build both lanes' set-ups would otherwise check at the same moment (test/support/global-setup.ts rebuilds when
 * src/ is newer than dist/): made here once, before either starts.
 */
function ensureFreshBuild() {
  let distMs = 0;
  try {
    distMs = newestMtimeMs(join(ROOT, 'dist'));
  } catch {
    // no dist yet
  }
  if (distMs >= newestMtimeMs(join(ROOT, 'src'))) return;
  const run = spawnSync('npm', ['run', '--silent', 'build'], { cwd: ROOT, stdio: 'inherit' });
  if (run.status !== 0) process.exit(run.status ?? 1);
}
