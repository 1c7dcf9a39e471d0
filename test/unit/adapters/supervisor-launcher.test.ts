// Issue 39: the detached supervisor runs with a small young generation (its RSS stays near flat over a batch).
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { launchSupervisor, SUPERVISOR_NODE_FLAGS } from '../../../src/adapters/supervisor-launcher.js';
import { SUPERVISOR_FILE } from '../../../src/core/evidence-names.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-launcher-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('launchSupervisor', () => {
  it('starts the supervisor with its Node flags (a 4 MiB young generation, --optimize-for-size) before the CLI and its arguments', async () => {
    // A stand-in for bin/run.js: records how it was started, then publishes its identity as the supervisor does.
    const script = join(dir, 'run.cjs');
    await writeFile(
      script,
      [
        "const { writeFileSync } = require('node:fs');",
        "const { join } = require('node:path');",
        "const output = process.argv[process.argv.indexOf('--output') + 1];",
        "writeFileSync(join(output, 'started.json'), JSON.stringify({ execArgv: process.execArgv, argv: process.argv.slice(2) }));",
        `writeFileSync(join(output, ${JSON.stringify(SUPERVISOR_FILE)}), JSON.stringify({ pid: process.pid }));`,
      ].join('\n'),
    );
    const identity = await launchSupervisor(script, dir, 'start');
    expect(identity.pid).toBeGreaterThan(0);
    const started = JSON.parse(await readFile(join(dir, 'started.json'), 'utf8')) as {
      execArgv: string[];
      argv: string[];
    };
    expect(SUPERVISOR_NODE_FLAGS).toEqual(['--max-semi-space-size=4', '--optimize-for-size']);
    expect(started.execArgv).toEqual(['--max-semi-space-size=4', '--optimize-for-size']);
    expect(started.argv).toEqual(['e1-batch', 'supervise', '--output', dir, '--mode', 'start']);
  });
});
