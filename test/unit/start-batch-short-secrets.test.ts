import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { prepareBatch } from '../../src/app/batch/start-batch.js';
import { InvalidInputError } from '../../src/core/errors.js';
import { procHostIdentity } from '../../src/adapters/host-identity.js';
import { answeringEngine } from '../support/fakes.js';
import { clockAt } from '../support/fake-time.js';

const engine = answeringEngine();
const clock = clockAt(() => new Date('2026-12-02T10:00:00Z'));
let dir: string;

async function start(environment: Record<string, string>, allowShortSecrets?: boolean) {
  const manifest = {
    schema: 'roboguide.e1.batch/v0.1',
    image: 'roboguide/pair-driver:1',
    jobs: [
      {
        job_id: 'a',
        argv: ['/opt/driver/run'],
        cwd: join(dir, 'cwd'),
        outcome_path: join(dir, 'out', 'a.json'),
        environment: { API_TOKEN: '${API_TOKEN}' },
      },
    ],
  };
  const path = join(dir, 'manifest.json');
  await writeFile(path, JSON.stringify(manifest));
  const output = join(dir, 'batch');
  const warnings: string[] = [];
  const record = await prepareBatch(
    { fs: new NodeFileSystem(), host: procHostIdentity, runtime: engine, clock },
    {
      manifestPath: path,
      output,
      registryPath: join(dir, 'r.db'),
      bindAddress: '127.0.0.1',
      environment,
      codeVersion: 't',
      ...(allowShortSecrets !== undefined ? { allowShortSecrets } : {}),
      onWarning: (m) => warnings.push(m),
    },
  );
  return { record, output, warnings };
}

describe('e1-batch start: ${NAME} values under 8 characters', () => {
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-short-secret-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('refuses one, naming the variable and not the value, and writes nothing', async () => {
    const failure = await start({ API_TOKEN: 'pw-1234' }).catch((err: unknown) => err);
    expect(failure).toBeInstanceOf(InvalidInputError);
    const text = JSON.stringify({
      message: (failure as Error).message,
      issues: (failure as InvalidInputError).issues,
    });
    expect(text).toMatch(/jobs\[0\]\.environment\.API_TOKEN.*API_TOKEN.*shorter than 8/);
    expect(text).not.toContain('pw-1234');
    expect(existsSync(join(dir, 'batch'))).toBe(false);
  });

  it('accepts one with allowShortSecrets: a warning names it, batch.json records the choice for the supervisor and resume', async () => {
    const { output, warnings } = await start({ API_TOKEN: 'pw-1234' }, true);
    expect(warnings).toEqual([
      expect.stringMatching(
        /^jobs\[0\]\.environment\.API_TOKEN references \$\{API_TOKEN\}, whose value is shorter than 8/,
      ),
    ]);
    expect(warnings.join('')).not.toContain('pw-1234');
    const batch = JSON.parse(await readFile(join(output, 'batch.json'), 'utf8')) as {
      allow_short_secrets?: boolean;
    };
    expect(batch.allow_short_secrets).toBe(true);
  });

  it('records nothing when every value is long enough', async () => {
    const { output, warnings } = await start({ API_TOKEN: 'long-enough-value' });
    expect(warnings).toEqual([]);
    expect(JSON.parse(await readFile(join(output, 'batch.json'), 'utf8'))).not.toHaveProperty(
      'allow_short_secrets',
    );
  });
});
