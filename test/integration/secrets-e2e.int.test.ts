/**
 * Secrets end to end (SPEC §3 Secrets, §10): a batch run through the real CLI as a user runs it (`e1-batch start`
 * with its detached supervisor), two `${NAME}` secrets in the environment, drivers that print them raw, base64 at
 * three alignments, split across writes, URL-encoded, JSON-escaped, in an Authorization header, on stderr and in
 * Codex session files. Afterwards EVERY byte the tool or the pairs left on the host is scanned for every form.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { containersLabelled, DRIVER_IMAGE, noDocker, sweep } from '../support/docker.js';
import { listFilesRecursively, windowsOf } from '../support/files.js';
import { cli } from '../support/cli.js';

const WINDOW_CHARS = 8;
const DRAIN_TIMEOUT_MS = 60_000;
/**
 * Files where hits are tolerated (none). Job s4 prints the secrets URL-encoded with lower-case hex (`%2b`, valid per
 * RFC 3986 §2.1) and JSON-escaped with `\/` (PHP's json_encode default); both used to pass the redactor.
 */
const KNOWN_GAP_FILES: ReadonlySet<string> = new Set<string>();
const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** 40 random characters, with a `+` and a `/` so the URL-encoded and JSON-escaped forms differ from the raw one. */
function randomSecret(): string {
  const pick = (n: number): string => [...randomBytes(n)].map((b) => ALNUM[b % ALNUM.length]).join('');
  return `${pick(19)}+${pick(10)}/${pick(9)}`;
}

/** Base64 of the secret after k = 0/1/2 bytes, keeping only the characters whose 6 bits all come from the secret. */
function base64Forms(secret: string): string[] {
  const forms: string[] = [];
  for (let k = 0; k < 3; k++) {
    const b64 = Buffer.from('x'.repeat(k) + secret).toString('base64');
    forms.push(b64.slice(Math.ceil((8 * k) / 6), Math.floor((8 * (k + secret.length)) / 6)));
  }
  return forms;
}

/** Every form a leak could take: raw, base64 ×3 alignments, URL-encoded, JSON-escaped (with and without `\/`). */
function secretForms(secret: string): string[] {
  const json = JSON.stringify(secret).slice(1, -1);
  const url = encodeURIComponent(secret);
  return [
    secret,
    ...base64Forms(secret),
    url,
    url.replace(/%[0-9A-F]{2}/g, (h) => h.toLowerCase()),
    json,
    json.replaceAll('/', '\\/'),
  ];
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

const sleepMs = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Files under each root (recursively) or the root itself when it is a file; missing roots are skipped. */
async function filesUnder(roots: readonly string[]): Promise<string[]> {
  const out: string[] = [];
  for (const root of roots) {
    const info = await stat(root).catch(() => null);
    if (info?.isDirectory() === true) out.push(...(await listFilesRecursively(root)));
    else if (info?.isFile() === true) out.push(root);
  }
  return out;
}

/** Windows found in `text`, as `label: window`. */
function hitsIn(text: string, label: string, windows: readonly string[]): string[] {
  return windows.filter((w) => text.includes(w)).map((w) => `${label}: ${w}`);
}

/** A job whose argv is a shell script adding the forms the driver does not print (URL-encoded, JSON, both at once). */
function mixedScript(): string {
  const dir = '/root/.codex/sessions/2026/12/03';
  return [
    '/opt/driver/run echo_env=API_TOKEN echo_env=OPENAI_API_KEY',
    `printf 'url: %s\\n' "$(printf %s "$API_TOKEN" | sed 's/+/%2B/g; s#/#%2F#g')"`,
    `printf 'json: {"k":"%s"}\\n' "$OPENAI_API_KEY"`,
    `printf 'both: %s%s\\n' "$API_TOKEN" "$OPENAI_API_KEY" >&2`,
    `mkdir -p ${dir}`,
    `printf '{"type":"response_item","payload":{"a":"%s","b":"Bearer %s"}}\\n' "$API_TOKEN" "$OPENAI_API_KEY" > ${dir}/rollout-mixed.jsonl`,
    '/opt/driver/run outcome=completed',
  ].join(' && ');
}

/** Forms other encoders write that the driver cannot: lower-case percent-encoding, JSON with `\/` (PHP, some Java). */
function variantScript(): string {
  return [
    `printf 'url-lower: %s\\n' "$(printf %s "$API_TOKEN" | sed 's/+/%2b/g; s#/#%2f#g')"`,
    `printf 'json-solidus: {"k":"%s"}\\n' "$(printf %s "$OPENAI_API_KEY" | sed 's#/#\\\\/#g')"`,
    '/opt/driver/run outcome=completed',
  ].join(' && ');
}

describe.skipIf(noDocker)(
  'secrets never reach the disk, the registry or the status (real CLI, detached supervisor)',
  () => {
    let work: string;
    let output: string;
    let registry: string;
    let manifestPath: string;
    let batchId: string | null = null;
    let supervisorPid: number | null = null;
    const env = { API_TOKEN: randomSecret(), OPENAI_API_KEY: randomSecret() };

    beforeAll(async () => {
      work = await mkdtemp(join(tmpdir(), 'rg-secrets-'));
      output = join(work, 'D');
      registry = join(work, 'registry.db');
      manifestPath = join(work, 'manifest.json');
      await mkdir(join(work, 'cwd'), { recursive: true });
      const environment = { API_TOKEN: '${API_TOKEN}', OPENAI_API_KEY: '${OPENAI_API_KEY}', MODEL: 'm-1' };
      const job = (id: string, argv: string[]) => ({
        job_id: id,
        argv,
        cwd: join(work, 'cwd'),
        outcome_path: join(work, 'out', `${id}.json`),
        environment,
        timeout_seconds: 60,
      });
      const manifest = {
        schema: 'roboguide.e1.batch/v0.1',
        image: DRIVER_IMAGE,
        jobs: [
          job('s1', [
            '/opt/driver/run',
            'echo_env=API_TOKEN',
            'session=echo_env=API_TOKEN',
            'outcome=completed',
          ]),
          job('s2', [
            '/opt/driver/run',
            'echo_env=OPENAI_API_KEY',
            'session=echo_env=OPENAI_API_KEY',
            'fake_secrets',
            'outcome=completed',
          ]),
          job('s3', ['/bin/sh', '-c', mixedScript()]),
          job('s4', ['/bin/sh', '-c', variantScript()]),
        ],
        capacity: { max_workers: 1 },
        stop_budget_seconds: 5,
      };
      await writeFile(manifestPath, JSON.stringify(manifest, null, 2));
    });

    afterAll(async () => {
      // The supervisor is this test's own child (detached): stop it only if a failure left it running.
      if (supervisorPid !== null && alive(supervisorPid)) process.kill(supervisorPid, 'SIGKILL');
      if (batchId !== null) await sweep({ 'roboguide.batch': batchId });
      await rm(work, { recursive: true, force: true });
    });

    it('runs four echoing pairs to drained and leaves zero traces of either secret', async () => {
      // Debug logging on: the tool's own logs must not carry resolved values at any level.
      const started = await cli(
        [
          'e1-batch',
          'start',
          '--manifest',
          manifestPath,
          '--output',
          output,
          '--registry',
          registry,
          '--json',
        ],
        { env: { ...env, ROBOGUIDE_LOG_LEVEL: 'trace' } },
      );
      expect(started.code, started.stderr).toBe(0);
      const startJson = JSON.parse(started.stdout) as { batch_id: string; supervisor_pid: number };
      batchId = startJson.batch_id;
      supervisorPid = startJson.supervisor_pid;

      const statusOutputs: string[] = [started.stdout, started.stderr];
      const deadline = Date.now() + DRAIN_TIMEOUT_MS;
      let state = '';
      while (Date.now() < deadline) {
        const s = await cli(['e1-batch', 'status', '--output', output, '--json']);
        statusOutputs.push(s.stdout, s.stderr);
        state = (JSON.parse(s.stdout) as { state: string }).state;
        if (state === 'drained' || state === 'paused') break;
        await sleepMs(500);
      }
      expect(state).toBe('drained');
      // Scan only once the supervisor has written its last line and exited.
      while (alive(supervisorPid) && Date.now() < deadline + 10_000) await sleepMs(100);
      expect(alive(supervisorPid)).toBe(false);

      const summary = JSON.parse(await readFile(join(output, 'SUMMARY.json'), 'utf8')) as {
        jobs: { job_id: string; classification: string }[];
      };
      expect(summary.jobs.map((j) => [j.job_id, j.classification])).toEqual([
        ['s1', 'completed'],
        ['s2', 'completed'],
        ['s3', 'completed'],
        ['s4', 'completed'],
      ]);
      expect(await containersLabelled({ 'roboguide.batch': batchId })).toEqual([]);

      // Redaction positively happened, in the logs and in the collected sessions.
      const s1Out = await readFile(join(output, 'jobs/s1/stdout.log'), 'utf8');
      expect(s1Out).toContain('raw: [REDACTED');
      expect(s1Out).toMatch(/split: \[REDACTED/);
      expect(s1Out).toMatch(/Authorization: \[REDACTED/);
      expect(await readFile(join(output, 'jobs/s1/stderr.log'), 'utf8')).toContain('stderr: [REDACTED');
      expect(await readFile(join(output, 'jobs/s3/stderr.log'), 'utf8')).toMatch(/both: \[REDACTED/);
      const sessionFiles = (await listFilesRecursively(join(output, 'jobs'))).filter((f) =>
        f.includes('/sessions/'),
      );
      expect(sessionFiles).toHaveLength(3);
      for (const f of sessionFiles) expect(await readFile(f, 'utf8'), f).toContain('[REDACTED');

      // The frozen manifest is the input, references and all; no resolved value.
      const frozen = await readFile(join(output, 'manifest.json'), 'utf8');
      expect(frozen).toBe(await readFile(manifestPath, 'utf8'));
      expect(frozen).toContain('${OPENAI_API_KEY}');

      const windows = new Map(
        Object.entries(env).map(([name, secret]) => [name, windowsOf(secretForms(secret), WINDOW_CHARS)]),
      );
      const files = await filesUnder([
        output,
        `${registry}`,
        `${registry}-wal`,
        `${registry}-shm`,
        join(work, 'cwd'),
        join(work, 'out'),
      ]);
      expect(files).toEqual(
        expect.arrayContaining([
          join(output, 'supervisor.log'),
          join(output, 'events.jsonl'),
          registry,
          ...sessionFiles,
        ]),
      );
      const hits: string[] = [];
      const knownGapHits: string[] = [];
      let bytesScanned = 0;
      for (const f of files) {
        const text = (await readFile(f)).toString('latin1');
        bytesScanned += text.length;
        const sink = KNOWN_GAP_FILES.has(relative(output, f)) ? knownGapHits : hits;
        for (const [name, w] of windows) sink.push(...hitsIn(text, `${f} (${name})`, w));
      }
      statusOutputs.forEach((text, i) => {
        for (const [name, w] of windows) hits.push(...hitsIn(text, `CLI output #${i} (${name})`, w));
      });
      const windowCount = [...windows.values()].reduce((n, w) => n + w.length, 0);
      console.info(
        `secrets-e2e: ${files.length} files, ${bytesScanned} bytes, ${statusOutputs.length} CLI outputs, ${windowCount} windows, ` +
          `${hits.length} hits (${knownGapHits.length} in known-gap files)`,
      );
      expect(hits).toEqual([]);
      expect(knownGapHits.length > 0, 'known redaction gaps fixed: empty KNOWN_GAP_FILES').toBe(
        KNOWN_GAP_FILES.size > 0,
      );
    });
  },
);
