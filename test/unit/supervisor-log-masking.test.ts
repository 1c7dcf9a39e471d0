import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createFileLogger } from '../../src/adapters/pino-logger.js';
import { bestEffort } from '../../src/app/batch/supervisor-ports.js';

// supervisor.log masks the batch's secret values in the whole line. A message cut before that masking (a pause
// cause's 500 characters) left a secret's first characters, which no longer match the value, in the file: these
// lines log the error's whole detail, which the line masking sees whole.
const SECRET = 'Tr0ub4dor-and-three-horses-correct-staple';
let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-log-masking-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("a failed write's error in supervisor.log", () => {
  it('a secret across the 500th character of the message is masked whole, no prefix of it left', async () => {
    const path = join(dir, 'supervisor.log');
    const logger = createFileLogger(path, [SECRET]);
    const message = `${'x'.repeat(488)} ${SECRET} tail`;
    await bestEffort(logger, 'status.json', () => Promise.reject(new Error(message)));
    logger.flush();
    const text = await readFile(path, 'utf8');
    expect(text).toContain('write failed; continuing fail-closed');
    expect(text).toContain('status.json');
    expect(text).not.toContain(SECRET.slice(0, 8));
  });
});
