/**
 * Hostile session content (SPEC §4 `sessions/`, §5 step 6): a pair whose driver fills /root/.codex/sessions with
 * links out of the tree, a hard link, a fifo, 20,000 tiny files or a 2 GiB sparse file before writing its outcome.
 * The real engine tars that directory; the collection must write only regular files (0600) and directories (0700)
 * inside the job's sessions/, record what it refused, and never change the verdict or skip the cleanup.
 */
import { randomUUID } from 'node:crypto';
import { lstat, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_EXTRACT_LIMITS } from '../../src/adapters/safe-extract.js';
import { runPair } from '../../src/app/pair/run-pair.js';
import { DRIVER_IMAGE, expectNoContainersLeft, noDocker, pairRunDeps, runtime } from '../support/docker.js';

const rt = runtime();
const SESSIONS = '/root/.codex/sessions';
const TINY_FILES = 20_000;
const jobsUsed: string[] = [];
let work: string;

interface TreeEntry {
  readonly path: string;
  readonly kind: 'file' | 'directory' | 'other';
  readonly mode: number;
}

/** Every entry under `dir`, by lstat (links are reported, never followed). */
async function tree(dir: string): Promise<TreeEntry[]> {
  const out: TreeEntry[] = [];
  for (const name of await readdir(dir)) {
    const path = join(dir, name);
    const info = await lstat(path);
    const kind = info.isFile() ? 'file' : info.isDirectory() ? 'directory' : 'other';
    out.push({ path, kind, mode: info.mode & 0o777 });
    if (kind === 'directory') out.push(...(await tree(path)));
  }
  return out;
}

async function exists(path: string): Promise<boolean> {
  return lstat(path).then(
    () => true,
    () => false,
  );
}

/** Shell steps shared by both pairs: links out of the tree, a hard link and a fifo, named so tar lists them first. */
function linkSteps(mark: string): string[] {
  return [
    `mkdir -p ${SESSIONS}/2026/12/02 && cd ${SESSIONS}`,
    'ln -s /etc a-etc-link',
    // Inside the container this writes the container's /etc; the archive carries only the link.
    `echo pwned > a-etc-link/${mark}`,
    `ln -s ../../../../tmp/${mark} b-up-link`,
    'ln -s /etc/passwd b-passwd-link',
    `printf '{"type":"session_meta","payload":{}}\\n' > 2026/12/02/c-real.jsonl`,
    'ln 2026/12/02/c-real.jsonl c-hard.jsonl',
    // Hostile modes in the container: extraction must still create 0600 files and 0700 directories. Setuid and setgid
    // bits cannot be set at all (our seccomp profile refuses them: the step checks it); the sticky bit can.
    '! chmod 6777 2026/12/02/c-real.jsonl && chmod 1777 2026/12/02/c-real.jsonl && chmod 0777 2026 2026/12',
    'mkfifo d-fifo',
  ];
}

async function runHostile(name: string, steps: readonly string[]) {
  const jobId = `hostile-${name}-${randomUUID().slice(0, 6)}`;
  jobsUsed.push(jobId);
  const spec = {
    job_id: jobId,
    argv: ['/bin/sh', '-c', [...steps, '/opt/driver/run outcome=completed'].join(' && ')],
    cwd: join(work, jobId, 'cwd'),
    outcome_path: join(work, jobId, 'out', 'outcome.json'),
    environment: {},
    ports: [],
    timeout_seconds: 120,
    image: DRIVER_IMAGE,
  };
  const output = join(work, jobId, 'evidence');
  const run = await runPair(pairRunDeps(rt), {
    specText: JSON.stringify(spec),
    specSource: `${jobId}.json`,
    output,
    bindAddress: '127.0.0.1',
    environment: {},
    codeVersion: 'test',
    cwd: work,
  });
  return { ...run, sessionsDir: join(output, 'sessions') };
}

/** What every hostile run must show: verdict untouched, container gone, only private regular files and dirs. */
async function expectContained(
  run: Awaited<ReturnType<typeof runHostile>>,
  mark: string,
): Promise<TreeEntry[]> {
  const { result, sessionsDir } = run;
  expect(result.classification).toBe('completed');
  expect(result.reasons).toEqual([]);
  expect(result.container.exit_code).toBe(0);
  expect(result.cleanup).toMatchObject({ verified_absent: true, removed: true });
  expect(await rt.inspect(result.container.id!)).toBeNull();
  const entries = await tree(sessionsDir);
  expect(entries.filter((e) => e.kind === 'other')).toEqual([]);
  expect(entries.filter((e) => e.kind === 'file' && e.mode !== 0o600)).toEqual([]);
  expect(entries.filter((e) => e.kind === 'directory' && e.mode !== 0o700)).toEqual([]);
  expect((await lstat(sessionsDir)).mode & 0o777).toBe(0o700);
  expect(entries.filter((e) => e.kind === 'file')).toHaveLength(result.sessions.files);
  // Nothing written outside the target: not through the /etc link, not through the ../ link.
  for (const outside of [
    join('/etc', mark),
    resolve(sessionsDir, '../../../../tmp', mark),
    join('/tmp', mark),
  ]) {
    expect(await exists(outside), outside).toBe(false);
  }
  expect(await readFile(join(sessionsDir, '2026/12/02/c-real.jsonl'), 'utf8')).toBe(
    '{"type":"session_meta","payload":{}}\n',
  );
  const refusals = result.sessions.refusals.join('\n');
  for (const pattern of [
    /symlink refused: sessions\/a-etc-link/,
    /symlink refused: sessions\/b-up-link/,
    /symlink refused: sessions\/b-passwd-link/,
    /hard link refused: sessions\/c-hard\.jsonl/,
    /fifo refused: sessions\/d-fifo/,
  ]) {
    expect(refusals).toMatch(pattern);
  }
  return entries;
}

describe.skipIf(noDocker)('hostile session content collected from a real container', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-hostile-'));
  });
  afterEach(() => expectNoContainersLeft(jobsUsed));
  afterAll(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it(`refuses links and a fifo and stops at the file-count limit among ${TINY_FILES} tiny files`, async () => {
    const mark = `rg-hostile-${randomUUID()}`;
    const started = Date.now();
    const run = await runHostile('many', [
      ...linkSteps(mark),
      'mkdir m-many && cd m-many',
      `seq 1 ${TINY_FILES} | xargs touch`,
      `cd ${SESSIONS}`,
      'echo late > z-after.jsonl',
    ]);
    const entries = await expectContained(run, mark);
    const { sessions } = run.result;
    expect(sessions.refusals).toContain(`file count limit reached (${DEFAULT_EXTRACT_LIMITS.maxFiles})`);
    expect(sessions.files).toBe(DEFAULT_EXTRACT_LIMITS.maxFiles);
    expect(await exists(join(run.sessionsDir, 'z-after.jsonl'))).toBe(false);
    console.info(
      `hostile-archive many: ${sessions.files} files kept of ${TINY_FILES + 1}, ${entries.length} entries, ${sessions.refusals.length} refusals, ${Date.now() - started} ms`,
    );
  });

  it('refuses a 2 GiB sparse file from its header, before reading its data', async () => {
    const mark = `rg-hostile-${randomUUID()}`;
    const started = Date.now();
    const run = await runHostile('sparse', [
      ...linkSteps(mark),
      'truncate -s 2G m-big',
      'echo late > z-after.jsonl',
    ]);
    await expectContained(run, mark);
    const { sessions } = run.result;
    expect(sessions.refusals).toContain(`file too large: sessions/m-big (${2 * 1024 ** 3} bytes)`);
    expect(sessions.files).toBe(1);
    expect(sessions.bytes).toBeLessThan(1024);
    expect(await exists(join(run.sessionsDir, 'm-big'))).toBe(false);
    expect(await exists(join(run.sessionsDir, 'z-after.jsonl'))).toBe(false);
    console.info(
      `hostile-archive sparse: ${sessions.files} file, ${sessions.bytes} bytes, refusals ${JSON.stringify(sessions.refusals)}, ${Date.now() - started} ms`,
    );
  });
});
