/** prepareBatch with fakes behind its ports: what batch.json records of the host, and refusals that write nothing. */
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../../../src/adapters/fs/node-file-system.js';
import { SUPERVISOR_FILE } from '../../../../src/core/evidence-names.js';
import type { SupervisorRecord } from '../../../../src/core/supervisor-record.js';
import { readStatus, readStatusFull } from '../../../../src/app/batch/read-status.js';
import { prepareBatch } from '../../../../src/app/batch/start-batch.js';
import type { StartBatchDeps } from '../../../../src/app/batch/start-batch-types.js';
import { EvidenceStore } from '../../../../src/app/evidence/evidence-store.js';
import { sha256Hex } from '../../../../src/app/digest.js';
import type { RoboguideError } from '../../../../src/core/errors.js';
import { InvalidInputError } from '../../../../src/core/errors.js';
import { FakeHost, FakePairRuntime, SUPERVISOR } from '../../../support/fake-pair-world.js';
import { clockAt } from '../../../support/fake-time.js';

let dir: string;
let runtime: FakePairRuntime;
let host: FakeHost;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-start-batch-'));
  runtime = new FakePairRuntime();
  host = new FakeHost();
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const deps = (): StartBatchDeps => ({
  fs: new NodeFileSystem(),
  host,
  runtime,
  clock: clockAt(() => new Date('2026-12-03T08:00:00Z')),
});

async function manifestFile(
  jobs = [{ job_id: 'a', argv: ['/run'], cwd: '/w', outcome_path: '' }],
): Promise<{ path: string; text: string }> {
  const text = JSON.stringify({
    schema: 'roboguide.e1.batch/v0.1',
    image: 'driver:1',
    jobs: jobs.map((j) => ({
      ...j,
      cwd: join(dir, 'cwd'),
      outcome_path: join(dir, 'out', `${j.job_id}.json`),
    })),
  });
  const path = join(dir, 'manifest.json');
  await writeFile(path, text);
  return { path, text };
}

const options = (manifestPath: string) => ({
  manifestPath,
  output: join(dir, 'D'),
  registryPath: join(dir, 'registry.db'),
  bindAddress: '127.0.0.1',
  environment: {},
  codeVersion: 'test',
});

describe('prepareBatch', () => {
  it('records the host boot id from the host port, the engine, and the manifest digest over the exact bytes', async () => {
    host.bootIdNow = 'boot-recorded';
    const { path, text } = await manifestFile();
    const record = await prepareBatch(deps(), options(path));
    expect(record.host_boot_id).toBe('boot-recorded');
    expect(record.engine).toEqual({ id: 'fake-engine', version: '0', api_version: '1.43' });
    expect(record.manifest_sha256).toBe(sha256Hex(text));
    expect(await readFile(join(dir, 'D', 'manifest.json'), 'utf8')).toBe(text);
  });

  it('an outcome_path that is a dangling symlink is there: refused at its job, nothing written', async () => {
    const { path } = await manifestFile();
    await mkdir(join(dir, 'out'));
    await symlink(join(dir, 'nowhere'), join(dir, 'out', 'a.json'));
    const err: unknown = await prepareBatch(deps(), options(path)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidInputError);
    expect((err as InvalidInputError).issues).toContainEqual({
      path: 'jobs[0].outcome_path',
      rule: "already exists: it would be replaced by this run's outcome; move it away first",
    });
    expect(existsSync(join(dir, 'D'))).toBe(false);
  });

  it('an image the engine lacks is refused (exit 2) before anything is written, naming its jobs and the fix', async () => {
    runtime.images.clear();
    const { path } = await manifestFile(
      [1, 2].map((i) => ({ job_id: `pair-000${i}`, argv: ['/run'], cwd: '', outcome_path: '' })),
    );
    const err = (await prepareBatch(deps(), { ...options(path), bin: 'bin/roboguide-eval' }).catch(
      (e: unknown) => e,
    )) as RoboguideError;
    expect([err.code, err.exitCode, err.message]).toEqual([
      'E_IMAGE_MISSING',
      2,
      'image driver:1 is not present on this engine (needed by 2 jobs: pair-0001, pair-0002)',
    ]);
    expect(err.suggestions).toEqual([
      'get it onto this engine: `docker build -t driver:1 <folder with its Dockerfile>`, `docker pull driver:1` or `docker load -i <file>`',
      'see docs/driver.md: building your own evaluation image',
    ]);
    expect(existsSync(join(dir, 'D'))).toBe(false);
  });

  it('a missing synthetic image also names `images build` in the command the user runs', async () => {
    runtime.images.clear();
    const text = JSON.stringify({
      schema: 'roboguide.e1.batch/v0.1',
      image: 'roboguide/pair-driver:1',
      jobs: [
        { job_id: 'a', argv: ['/run'], cwd: join(dir, 'cwd'), outcome_path: join(dir, 'out', 'a.json') },
      ],
    });
    await writeFile(join(dir, 'm.json'), text);
    const err = (await prepareBatch(deps(), {
      ...options(join(dir, 'm.json')),
      bin: 'bin/roboguide-eval',
    }).catch((e: unknown) => e)) as RoboguideError;
    expect(err.message).toBe('image roboguide/pair-driver:1 is not present on this engine (needed by job a)');
    expect(err.suggestions).toContain(
      'the synthetic images of this checkout: `bin/roboguide-eval images build`',
    );
  });

  it('pins each image to its id in batch.json when the engine resolves ids', async () => {
    const pinning = Object.assign(runtime, {
      imageId: (image: string) =>
        Promise.resolve(runtime.images.has(image) ? `sha256:${'1'.repeat(64)}` : null),
    });
    const { path } = await manifestFile();
    const record = await prepareBatch({ ...deps(), runtime: pinning }, options(path));
    expect(record.images).toEqual({ 'driver:1': `sha256:${'1'.repeat(64)}` });
  });
});

describe('readStatus (host port)', () => {
  it('the recorded supervisor counts as alive only when the host says its process lives; the full derivation agrees', async () => {
    const { path } = await manifestFile();
    await prepareBatch(deps(), options(path));
    const store = new EvidenceStore(new NodeFileSystem(), join(dir, 'D'));
    const record: SupervisorRecord = { ...SUPERVISOR, started_at: '2026-12-03T08:00:01.000Z', mode: 'start' };
    await store.writeJsonAtomic(SUPERVISOR_FILE, record);
    await store.appendJournal({
      type: 'supervisor_started',
      at: record.started_at,
      mode: 'start',
      pid: record.pid,
      start_ticks: record.start_ticks,
      boot_id: record.boot_id,
    });
    const now = new Date('2026-12-03T08:05:00Z');
    expect((await readStatus(store, undefined, now, host)).supervisor?.alive).toBe(false);
    host.alive.add(SUPERVISOR.pid);
    const live = await readStatus(store, undefined, now, host);
    expect(live.supervisor?.alive).toBe(true);
    expect(live).toEqual(await readStatusFull(store, undefined, now, host));
  });
});
