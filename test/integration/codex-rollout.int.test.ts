import { randomUUID } from 'node:crypto';
import { cp, mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runPair } from '../../src/app/pair/run-pair.js';
import { DRIVER_IMAGE, expectNoContainersLeft, noDocker, pairRunDeps, runtime } from '../support/docker.js';

/**
 * End to end with a rollout the REAL Codex CLI 0.171.0 wrote for a 429 (test/fixtures/codex):
 * the pair copies it from its bind-mounted cwd into /root/.codex/sessions/YYYY/MM/DD/, as Codex
 * would have written it; the collected sessions are diagnosed into result.json.
 */

const FIXTURE_DIR = fileURLToPath(new URL('../fixtures/codex/0.171.0/429/', import.meta.url));
const rt = runtime();
const jobsUsed: string[] = [];
let work: string;

async function rolloutOf(dir: string): Promise<string> {
  const files = (await readdir(dir, { recursive: true })).map(String).filter((p) => p.endsWith('.jsonl'));
  expect(files).toHaveLength(1);
  return join(dir, files[0] ?? '');
}

describe.skipIf(noDocker)('a pair holding a real Codex 0.171 rollout of a 429', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-codex-'));
  });
  afterEach(() => expectNoContainersLeft(jobsUsed));
  afterAll(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it('gets provider_failure {response_too_many_failed_attempts, 429}, its classification unchanged, its container removed', async () => {
    const job = `it-codex-${randomUUID().slice(0, 6)}`;
    jobsUsed.push(job);
    const cwd = join(work, job, 'cwd');
    await mkdir(cwd, { recursive: true });
    const rollout = await rolloutOf(FIXTURE_DIR);
    await cp(rollout, join(cwd, basename(rollout)));
    const script = [
      'set -e',
      'mkdir -p /root/.codex/sessions/2026/12/02',
      `cp "${join(cwd, basename(rollout))}" /root/.codex/sessions/2026/12/02/`,
      'exec /opt/driver/run outcome=completed',
    ].join('; ');
    const spec = {
      job_id: job,
      argv: ['/bin/sh', '-c', script],
      cwd,
      outcome_path: join(work, job, 'out', 'outcome.json'),
      environment: {},
      ports: [],
      timeout_seconds: 120,
      image: DRIVER_IMAGE,
    };
    const { result, output } = await runPair(pairRunDeps(rt), {
      specText: JSON.stringify(spec),
      specSource: `${job}.json`,
      output: join(work, job, 'evidence'),
      bindAddress: '127.0.0.1',
      environment: {},
      codeVersion: 'test',
      cwd: work,
    });
    const onDisk = JSON.parse(await readFile(join(output, 'result.json'), 'utf8'));
    expect(onDisk.provider_failure).toEqual({
      schema: 'roboguide.provider_failure/v1',
      kind: 'response_too_many_failed_attempts',
      http_status: 429,
    });
    expect(onDisk.provider_failure_error_kind).toBeNull();
    // A hint, never a verdict: the outcome said completed, and so does the classification.
    expect(onDisk.classification).toBe('completed');
    expect(onDisk.reasons).toEqual([]);
    expect(result.cleanup).toMatchObject({ verified_absent: true, removed: true });
    expect(await rt.inspect(result.container.id!)).toBeNull();
    // The rollout itself was collected with the evidence.
    const collected = (await readdir(join(output, 'sessions'), { recursive: true })).map(String);
    expect(collected.some((p) => p.endsWith(basename(rollout)))).toBe(true);
  });
});
