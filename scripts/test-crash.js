#!/usr/bin/env node
// `npm run test:crash [-- --full]`: the supervisor crash tests. Without --full, the seeded CI subset; with it,
// every systematic kill point (≥ 300) and 100 random SIGKILLs (ROBOGUIDE_CRASH_FULL=1). Other arguments go to vitest.
import { spawnSync } from 'node:child_process';

const args = process.argv.slice(2);
const full = args.includes('--full');
const rest = args.filter((a) => a !== '--full');
const env = { ...process.env, ...(full ? { ROBOGUIDE_CRASH_FULL: '1' } : {}) };
// The reattach matrix (large logs, supervisor SIGKILL and OOM kill) runs with them; --full adds its 400 MiB cells.
const files = ['test/integration/crash.int.test.ts', 'test/integration/reattach-logs.int.test.ts'];
const run = spawnSync('npx', ['vitest', 'run', '--project', 'integration', ...files, ...rest], {
  stdio: 'inherit',
  env,
});
process.exit(run.status ?? 1);
