// Runs the Python adapters' unittest suite (clients/python/tests) against the real server and engine, so that
// `npm test` (and .ci/run) covers it. Python 3.10+ with the standard library only; no package is installed.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { noDocker } from '../support/docker.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const python = spawnSync('python3', ['-c', 'import sys; print(sys.version_info >= (3, 10))'], {
  encoding: 'utf8',
});
const noPython = python.status !== 0 || python.stdout.trim() !== 'True';
if (noPython && process.env['CI'] === 'true')
  throw new Error('python3 >= 3.10 is required for the adapter tests in CI');

describe.skipIf(noDocker || noPython)('Python adapters (unittest) against a real server', () => {
  it('python3 -m unittest discover -s clients/python/tests passes', () => {
    const run = spawnSync(
      'python3',
      ['-m', 'unittest', 'discover', '-s', 'clients/python/tests', '-t', 'clients/python', '-v'],
      {
        cwd: ROOT,
        encoding: 'utf8',
        env: { ...process.env, ROBOGUIDE_NODE: process.execPath },
        timeout: 600_000,
      },
    );
    expect(run.status, `${run.stdout}\n${run.stderr}`).toBe(0);
    expect(run.stderr).toMatch(/^OK/m);
  });
});
