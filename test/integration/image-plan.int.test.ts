/**
 * Issue 43 on the real engine and Debian's `docker-registry` on loopback: a batch whose images are not on the engine
 * resolves them at start (digest frozen in batch.json), pulls them ahead within `capacity.image_disk_bytes` (the
 * images it pulled, sampled, never above it; no image pulled twice unless it was evicted), runs every pair on the
 * frozen digest even after the tag moved; a registry killed mid-batch pauses it and resume drains it; a supervisor
 * SIGKILLed mid-pull loses nothing; registry credentials (htpasswd basic auth) reach no byte on disk.
 * The CI size: 24 jobs over 8 images; the 120-job, 40-image run is bench/image-plan.bench.ts (docs/benchmarks.md).
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, cli } from '../support/cli.js';
import { startTestServer } from '../../src/testing/index.js';
import { noDocker, sweep } from '../support/docker.js';
import { listFilesRecursively } from '../support/files.js';
import { leakForms } from '../support/leak-forms.js';
import {
  enginePrefixImages,
  moveTag,
  pushTestImages,
  removePrefixImages,
  requireImageRegistry,
  startImageRegistry,
  type TestImage,
  type TestImageRegistry,
} from '../support/image-registry.js';

const PORT = 5943;
const PREFIX = 'rg43-ci';
const MB = 1024 * 1024;
const skip = noDocker || !requireImageRegistry();

interface Journal {
  readonly type: string;
  readonly action?: string;
  readonly ref?: string;
  readonly reasons?: readonly string[];
}

async function journalOf(output: string): Promise<Journal[]> {
  const text = await readFile(join(output, 'events.jsonl'), 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Journal);
}

async function writeManifest(
  root: string,
  name: string,
  images: readonly string[],
  jobs: number,
  extra: object,
  actions: readonly string[] = ['sleep=1', 'outcome=completed'],
): Promise<string> {
  const work = join(root, `${name}-work`);
  await mkdir(join(work, 'out'), { recursive: true });
  const per = Math.ceil(jobs / images.length);
  const manifest = {
    schema: 'roboguide.e1.batch/v0.1',
    jobs: Array.from({ length: jobs }, (_, i) => ({
      job_id: `${name}-${String(i).padStart(3, '0')}`,
      image: images[Math.floor(i / per)],
      argv: ['/opt/driver/run', ...actions],
      cwd: work,
      outcome_path: join(work, 'out', `${i}.json`),
      timeout_seconds: 120,
    })),
    stop_budget_seconds: 5,
    ...extra,
  };
  const path = join(root, `${name}.json`);
  await writeFile(path, JSON.stringify(manifest));
  return path;
}

async function registryDigest(host: string, image: string, auth?: string): Promise<string> {
  const [repo, tag] = image.slice(host.length + 1).split(':');
  const res = await fetch(`http://${host}/v2/${repo}/manifests/${tag}`, {
    method: 'HEAD',
    headers: {
      accept: 'application/vnd.docker.distribution.manifest.v2+json',
      ...(auth !== undefined ? { authorization: `Basic ${auth}` } : {}),
    },
  });
  return res.headers.get('docker-content-digest') ?? '';
}

async function receiptsOf(output: string): Promise<{ job_id: string; image: string; image_id?: string }[]> {
  const files = (await listFilesRecursively(join(output, 'jobs'))).filter((f) => f.endsWith('receipt.json'));
  return Promise.all(files.map(async (f) => JSON.parse(await readFile(f, 'utf8')) as never));
}

async function resultsOf(output: string): Promise<{ classification: string; reasons: string[] }[]> {
  const files = (await listFilesRecursively(join(output, 'jobs'))).filter((f) => f.endsWith('result.json'));
  return Promise.all(files.map(async (f) => JSON.parse(await readFile(f, 'utf8')) as never));
}

describe.skipIf(skip)('image plan on a real registry (issue 43)', () => {
  let root: string;
  let registry: TestImageRegistry;
  let images: TestImage[];
  let registryDb: string;

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'rg43-plan-'));
    registryDb = join(root, 'capacity.db');
    registry = await startImageRegistry(PORT);
    removePrefixImages(registry.host, PREFIX);
    images = pushTestImages(registry, PREFIX, 8, (i) => 20 + ((i * 7) % 5) * 3);
  }, 600_000);

  afterAll(async () => {
    await sweep({ 'roboguide.test': PREFIX }).catch(() => 0);
    if (registry !== undefined) {
      removePrefixImages(registry.host, PREFIX);
      registry.stop();
    }
    if (process.env['RG43_KEEP'] !== '1') await rm(root, { recursive: true, force: true });
  });

  it('24 jobs over 8 absent images drain within a third of their size, each pair on the digest frozen at start', async () => {
    removePrefixImages(registry.host, PREFIX);
    // Sizes as the engine stores them: pulled once here, measured, removed (the budget is a third of their sum).
    const refs = images.map((i) => i.ref);
    const total = images.reduce((sum, i) => sum + i.randomBytes + 8 * MB, 0);
    const budget = Math.floor(total / 3);
    const manifest = await writeManifest(root, 'scale', refs, 24, {
      capacity: { max_workers: 1, image_disk_bytes: budget, image_pulls: 2 },
    });
    const output = join(root, 'scale-D');
    const frozen = await Promise.all(refs.map((r) => registryDigest(registry.host, r)));
    const started = await cli([
      'e1-batch',
      'start',
      '--manifest',
      manifest,
      '--output',
      output,
      '--registry',
      registryDb,
      '--json',
    ]);
    expect(started.code, started.stderr).toBe(0);
    // The last image's tag moves right after start: its pairs still run the digest start froze.
    const movedTag = refs[7] ?? '';
    moveTag(movedTag);
    expect(await registryDigest(registry.host, movedTag)).not.toBe(frozen[7]);

    const samples: number[] = [];
    for (;;) {
      samples.push(enginePrefixImages(registry.host, PREFIX).reduce((s, i) => s + i.bytes, 0));
      const status = await cli(['e1-batch', 'status', '--output', output, '--json']);
      const state = (JSON.parse(status.stdout || '{}') as { state?: string }).state;
      if (state === 'drained' || state === 'paused' || state === 'stopped') {
        expect(state).toBe('drained');
        break;
      }
      await new Promise((r) => setTimeout(r, 300));
    }
    const batch = JSON.parse(await readFile(join(output, 'batch.json'), 'utf8')) as {
      image_plan: { images: Record<string, { digest: string; ref: string }>; budget_bytes: number };
    };
    expect(batch.image_plan.budget_bytes).toBe(budget);
    expect(refs.map((r) => batch.image_plan.images[r]?.digest)).toEqual(frozen);
    const receipts = await receiptsOf(output);
    expect(receipts).toHaveLength(24);
    for (const r of receipts) expect(r.image_id).toBe(batch.image_plan.images[r.image]?.ref);
    expect((await resultsOf(output)).map((r) => r.classification)).toEqual(Array(24).fill('completed'));
    // Sampled: never above the budget. Pulled twice only after an eviction.
    expect(Math.max(...samples)).toBeLessThanOrEqual(budget);
    const journal = await journalOf(output);
    for (const ref of Object.values(batch.image_plan.images).map((i) => i.ref)) {
      const pulled = journal.filter(
        (e) => e.type === 'image' && e.action === 'pulled' && e.ref === ref,
      ).length;
      const evicted = journal.filter(
        (e) => e.type === 'image' && e.action === 'evicted' && e.ref === ref,
      ).length;
      expect(pulled, ref).toBeGreaterThanOrEqual(1);
      expect(pulled, ref).toBeLessThanOrEqual(1 + evicted);
    }
    expect(journal.some((e) => e.type === 'image' && e.action === 'evicted')).toBe(true);
  }, 600_000);

  it('an image no registry has is refused at start naming it and the registry message; nothing is written', async () => {
    const manifest = await writeManifest(root, 'absent', [`${registry.host}/${PREFIX}-nope:1`], 2, {});
    const output = join(root, 'absent-D');
    const run = await cli([
      'e1-batch',
      'start',
      '--manifest',
      manifest,
      '--output',
      output,
      '--registry',
      registryDb,
      '--json',
    ]);
    expect(run.code).toBe(2);
    expect(run.stdout + run.stderr).toMatch(/E_IMAGE_MISSING/);
    expect(run.stdout + run.stderr).toMatch(
      new RegExp(
        `${PREFIX}-nope:1 is not present on this engine and its registry cannot resolve it: .*(unknown|not found)`,
        'i',
      ),
    );
    expect(existsSync(join(output, 'batch.json'))).toBe(false);
  });

  it('a registry killed mid-batch pauses it (nothing claimed for the pairs without their image); resume drains it', async () => {
    removePrefixImages(registry.host, PREFIX);
    const refs = images.slice(0, 4).map((i) => i.ref);
    const manifest = await writeManifest(
      root,
      'outage',
      refs,
      8,
      { capacity: { max_workers: 1, image_pulls: 1 } },
      ['sleep=2', 'outcome=completed'],
    );
    const output = join(root, 'outage-D');
    const started = await cli([
      'e1-batch',
      'start',
      '--manifest',
      manifest,
      '--output',
      output,
      '--registry',
      registryDb,
      '--json',
    ]);
    expect(started.code, started.stderr).toBe(0);
    for (;;) {
      const journal = await journalOf(output);
      if (journal.some((e) => e.type === 'image' && e.action === 'pulled')) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    registry.kill();
    let state = '';
    for (let i = 0; i < 600 && state !== 'paused'; i += 1) {
      const status = await cli(['e1-batch', 'status', '--output', output, '--json']);
      state = (JSON.parse(status.stdout || '{}') as { state?: string }).state ?? '';
      if (state === 'drained') break;
      await new Promise((r) => setTimeout(r, 300));
    }
    expect(state).toBe('paused');
    const journal = await journalOf(output);
    expect(journal.filter((e) => e.type === 'paused').flatMap((e) => e.reasons)).toContain(
      'image_registry_unavailable',
    );
    const claimedBefore = (await receiptsOf(output)).length;
    expect(claimedBefore).toBeLessThan(8);
    expect((await resultsOf(output)).every((r) => r.classification === 'completed')).toBe(true);
    await registry.start();
    const resumed = await cli(['e1-batch', 'resume', '--output', output, '--foreground', '--json']);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect((await resultsOf(output)).map((r) => r.classification)).toEqual(Array(8).fill('completed'));
  }, 600_000);

  it('a supervisor SIGKILLed mid-pull: resume pulls again and every pair runs once', async () => {
    removePrefixImages(registry.host, PREFIX);
    const refs = images.slice(4, 8).map((i) => i.ref);
    const manifest = await writeManifest(
      root,
      'kill',
      refs,
      4,
      { capacity: { max_workers: 1, image_pulls: 1 } },
      ['count', 'outcome=completed'],
    );
    const output = join(root, 'kill-D');
    const child = spawn(
      process.execPath,
      [
        BIN,
        'e1-batch',
        'start',
        '--manifest',
        manifest,
        '--output',
        output,
        '--registry',
        registryDb,
        '--foreground',
      ],
      {
        stdio: 'ignore',
      },
    );
    for (;;) {
      const journal = await journalOf(output);
      const started = journal.filter((e) => e.type === 'image' && e.action === 'pull_started').length;
      const pulled = journal.filter((e) => e.type === 'image' && e.action === 'pulled').length;
      if (started >= 2 && started > pulled) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    child.kill('SIGKILL');
    await new Promise((r) => child.on('exit', r));
    const resumed = await cli(['e1-batch', 'resume', '--output', output, '--foreground', '--json']);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect((await resultsOf(output)).map((r) => r.classification)).toEqual(Array(4).fill('completed'));
    const counter = await readFile(join(root, 'kill-work', 'driver-runs.log'), 'utf8');
    const runs = counter
      .split('\n')
      .filter(Boolean)
      .map((l) => l.split(' ')[0]);
    expect(runs.sort()).toEqual(['kill-000', 'kill-001', 'kill-002', 'kill-003']);
  }, 600_000);
});

describe.skipIf(skip)('registry credentials (issue 43)', () => {
  let root: string;
  let registry: TestImageRegistry;
  let images: TestImage[];
  const user = 'rg43-user-name';
  const password = `rg43-pw-${Math.random().toString(36).slice(2)}-Zq9`;
  const PREFIX_AUTH = 'rg43-auth';

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'rg43-auth-'));
    // Pushed while the registry is open; then it serves the same storage with basic auth only.
    registry = await startImageRegistry(PORT + 1);
    removePrefixImages(registry.host, PREFIX_AUTH);
    images = pushTestImages(registry, PREFIX_AUTH, 2, () => 5);
    registry.kill();
    await registry.start({ user, password });
  }, 300_000);

  afterAll(async () => {
    if (registry !== undefined) {
      removePrefixImages(registry.host, PREFIX_AUTH);
      registry.stop();
    }
    await rm(root, { recursive: true, force: true });
  });

  it('without credentials start is refused naming the registry’s answer; with ${ENV} ones the batch drains and no byte on disk holds them', async () => {
    const registryDb = join(root, 'capacity.db');
    const refs = images.map((i) => i.ref);
    const open = await writeManifest(root, 'noauth', refs, 2, {});
    const refused = await cli([
      'e1-batch',
      'start',
      '--manifest',
      open,
      '--output',
      join(root, 'noauth-D'),
      '--registry',
      registryDb,
      '--json',
    ]);
    expect(refused.code).toBe(2);
    expect(refused.stdout + refused.stderr).toMatch(/E_IMAGE_MISSING/);
    expect(refused.stdout + refused.stderr).toMatch(/unauthorized|authentication required|no basic auth/i);

    const manifest = await writeManifest(root, 'auth', refs, 4, {
      registries: {
        [registry.host]: { username: '${RG43_REGISTRY_USER}', password: '${RG43_REGISTRY_PASSWORD}' },
      },
    });
    const output = join(root, 'auth-D');
    const env = { RG43_REGISTRY_USER: user, RG43_REGISTRY_PASSWORD: password };
    const run = await cli(
      [
        'e1-batch',
        'start',
        '--manifest',
        manifest,
        '--output',
        output,
        '--registry',
        registryDb,
        '--foreground',
        '--json',
      ],
      { env },
    );
    expect(run.code, run.stderr).toBe(0);
    expect((await resultsOf(output)).map((r) => r.classification)).toEqual(Array(4).fill('completed'));
    const journal = await journalOf(output);
    expect(journal.filter((e) => e.type === 'image' && e.action === 'pulled')).toHaveLength(2);

    // The new outputs (report with the image plan, status, doctor on the manifest): on disk and on stdout, scanned too.
    const report = await cli(['e1-batch', 'report', '--output', output, '--json'], { env });
    expect(report.code, report.stderr).toBe(0);
    const plan = (JSON.parse(report.stdout) as { image_plan: { images: { image: string; pulls: number }[] } })
      .image_plan;
    expect(plan.images.map((i) => [i.image, i.pulls])).toEqual(refs.map((r) => [r, 1]));
    expect(await readFile(join(output, 'report.html'), 'utf8')).toContain('id="image-plan"');
    const status = await cli(['e1-batch', 'status', '--output', output, '--json'], { env });
    const doctor = await cli(['doctor', '--manifest', manifest, '--output', root, '--json'], { env });
    expect(status.code, status.stderr).toBe(0);

    const secrets = [password, Buffer.from(`${user}:${password}`).toString('base64')];
    const files = await listFilesRecursively(root);
    const hits: string[] = [];
    for (const file of files) {
      const bytes = (await readFile(file)).toString('latin1');
      for (const secret of secrets)
        for (const form of leakForms(secret)) if (bytes.includes(form)) hits.push(`${file}: ${form}`);
    }
    expect(files.length).toBeGreaterThan(10);
    expect(hits).toEqual([]);
    expect(files).toContain(join(output, 'report.html'));
    const outputs = [run, refused, report, status, doctor].flatMap((o) => [o.stdout, o.stderr]);
    for (const out of outputs)
      for (const secret of secrets) for (const form of leakForms(secret)) expect(out).not.toContain(form);
  }, 600_000);

  it('serve: POST /v1/images/pull streams progress then the image, credentials only as allowed ${NAME}s, on no disk or log', async () => {
    removePrefixImages(registry.host, PREFIX_AUTH);
    const s = await startTestServer({
      clientMode: 'raw',
      env: { RG43_REGISTRY_USER: user, RG43_REGISTRY_PASSWORD: password, ROBOGUIDE_LOG_LEVEL: 'debug' },
      allowEnv: ['RG43_REGISTRY_USER', 'RG43_REGISTRY_PASSWORD'],
    });
    try {
      const ref = images[0]?.ref ?? '';
      const literal = await s.client.call('POST', '/v1/images/pull', {
        body: { image: ref, credentials: { username: user, password } },
      });
      expect(literal.status).toBe(400);
      const res = await s.client.open('POST', '/v1/images/pull', {
        body: {
          image: ref,
          credentials: { username: '${RG43_REGISTRY_USER}', password: '${RG43_REGISTRY_PASSWORD}' },
        },
      });
      const chunks: Buffer[] = [];
      for await (const c of res) chunks.push(c as Buffer);
      const lines = Buffer.concat(chunks)
        .toString('utf8')
        .trim()
        .split('\n')
        .map(
          (l) =>
            JSON.parse(l) as { progress?: unknown; image?: { ref: string; id: string }; error?: unknown },
        );
      expect(res.statusCode).toBe(200);
      expect(lines.some((l) => l.progress !== undefined)).toBe(true);
      expect(lines.at(-1)?.image?.ref).toBe(ref);
      expect(enginePrefixImages(registry.host, PREFIX_AUTH).map((i) => i.id)).toContain(
        lines.at(-1)?.image?.id,
      );
      const hits: string[] = [];
      for (const file of await listFilesRecursively(s.dataDir)) {
        const bytes = (await readFile(file)).toString('latin1');
        for (const form of leakForms(password)) if (bytes.includes(form)) hits.push(`${file}: ${form}`);
      }
      for (const form of leakForms(password)) if (s.stderr().includes(form)) hits.push(`stderr: ${form}`);
      expect(hits).toEqual([]);
    } finally {
      await s.dispose();
      removePrefixImages(registry.host, PREFIX_AUTH);
    }
  }, 300_000);
});
