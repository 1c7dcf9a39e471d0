import { randomUUID } from 'node:crypto';
import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import {
  containersLabelled,
  expectNoContainersLeft,
  PairDriverContainer,
  RoboguideServer,
  type RoboguideServerOptions,
  type StartedRoboguideServer,
} from '../../src/testing/index.js';
import { DRIVER_IMAGE, noDocker, runtime } from '../support/docker.js';
import { until } from '../support/until.js';

/**
 * serve against a hostile or careless caller (issue 22), real engine and real server process: a slow NDJSON reader
 * (memory bounded, the exec paused, killed past the buffer cap), references to server variables that were not
 * allowed, concurrency limits, and containers that merely carry serve's labels (left alone, reported).
 */

const RUN = `it-serve-c-${randomUUID().slice(0, 8)}`;
const LABEL = { 'it.serve.containment': RUN };
const SECRET = `allowed-${randomUUID()}`;
const OTHER = `other-${randomUUID()}`;
const BIN = fileURLToPath(new URL('../../bin/run.js', import.meta.url));
const rt = runtime();
const servers: StartedRoboguideServer[] = [];

interface Created {
  session_id: string;
  container_id: string;
}

async function server(options: RoboguideServerOptions = {}): Promise<StartedRoboguideServer> {
  const s = await new RoboguideServer({
    env: { RG_ALLOWED: SECRET, RG_OTHER: OTHER },
    allowEnv: ['RG_ALLOWED'],
    clientMode: 'raw',
    ...options,
  }).start();
  servers.push(s);
  return s;
}

async function createSession(
  s: StartedRoboguideServer,
  extra: Record<string, unknown> = {},
): Promise<Created> {
  const res = await s.client.call<Created>('POST', '/v1/sessions', {
    body: { image: DRIVER_IMAGE, labels: LABEL, ...extra },
  });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body;
}

async function ps(s: StartedRoboguideServer, id: string): Promise<string> {
  const res = await s.client.call<{ stdout: string }>('POST', `/v1/sessions/${id}/exec`, {
    body: { argv: ['ps'] },
  });
  return res.body.stdout;
}

/** Resident and peak memory of a process, from /proc/PID/status (kB → MiB). */
async function memoryMib(pid: number): Promise<{ rss: number; hwm: number }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const field = (name: string): number =>
    Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN) / 1024;
  return { rss: field('VmRSS'), hwm: field('VmHWM') };
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** The NDJSON body read to its end, as events. */
async function events(res: IncomingMessage): Promise<Record<string, unknown>[]> {
  const chunks: Buffer[] = [];
  for await (const chunk of res) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks)
    .toString('utf8')
    .trim()
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe.skipIf(noDocker)(
  'serve containment: slow readers, references, limits, foreign containers (real engine)',
  () => {
    afterAll(async () => {
      await Promise.all(
        servers.map(async (s) => {
          await s.kill(); // SIGTERM: each deletes its sessions; restart tests share a folder, so no stop() check here
          await s.release();
        }),
      );
      await expectNoContainersLeft(LABEL);
    });

    it('a slow NDJSON reader for 10 s of a fast-printing exec: the server stays small and the exec is paused, not buffered', async () => {
      const s = await server();
      const pid = s.process.pid!;
      const session = await createSession(s);
      const before = await memoryMib(pid);
      const abort = new AbortController();
      const res = await s.client.open('POST', `/v1/sessions/${session.session_id}/exec?stream=1`, {
        body: { command: 'yes 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef' },
        signal: abort.signal,
      });
      expect(res.statusCode).toBe(200);
      let read = 0;
      let peakRss = before.rss;
      const started = Date.now();
      try {
        // At most one chunk (≤ 64 KiB) per 100 ms: well under 1 MiB/s against `yes`, which writes hundreds of MiB/s.
        for await (const chunk of res) {
          read += (chunk as Buffer).length;
          if (Date.now() - started > 10_000) break;
          peakRss = Math.max(peakRss, (await memoryMib(pid)).rss);
          await sleep(100);
        }
      } finally {
        abort.abort();
      }
      const after = await memoryMib(pid);
      console.info(
        `slow reader: server RSS ${before.rss.toFixed(1)} MiB before, peak ${peakRss.toFixed(1)} MiB during 10 s, VmHWM ${after.hwm.toFixed(1)} MiB; client read ${(read / 1048576).toFixed(2)} MiB`,
      );
      expect(read).toBeGreaterThan(0);
      expect(peakRss - before.rss).toBeLessThan(64);
      // The client went away: the paused exec is killed, and the session still answers.
      await until(
        async () => ((await ps(s, session.session_id)).includes('yes 0123') ? undefined : true),
        'exec killed',
      );
    }, 60_000);

    it('past --stream-buffer-cap the exec is killed and the stream ends with E_SLOW_READER', async () => {
      const s = await server({ extraArgs: ['--stream-buffer-cap', '65536'] });
      const session = await createSession(s);
      // Lines of control characters: each byte is six in JSON (\u0001), so what the server holds grows fast.
      const res = await s.client.open('POST', `/v1/sessions/${session.session_id}/exec?stream=1`, {
        body: { command: "head -c 200000 /dev/zero | tr '\\0' '\\1'; echo; sleep 300" },
      });
      res.pause();
      await until(
        () => Promise.resolve(s.stderr().includes('the client read too slowly') ? true : undefined),
        'exec killed while the reader is paused',
      );
      const all = await events(res);
      const left = await ps(s, session.session_id);
      expect(left).not.toContain('sleep 300');
      expect(left).not.toContain('head -c');
      expect(all.at(-1)).toMatchObject({ error: { code: 'E_SLOW_READER' } });
      expect(String((all.at(-1)!['error'] as { message: string }).message)).toContain('--stream-buffer-cap');
      expect(all.some((e) => 'exit' in e)).toBe(false);
      const log = (await readFile(join(s.dataDir, 'sessions', session.session_id, 'execs.jsonl'), 'utf8'))
        .trim()
        .split('\n');
      const line = log
        .map((l) => JSON.parse(l) as { argv: string[]; killed?: string })
        .find((l) => l.argv.join(' ').includes('head -c 200000'));
      expect(line).toMatchObject({ killed: 'slow_reader', client_gone: true });
      expect(s.stderr()).toContain('the client read too slowly');
    }, 60_000);

    it('${NAME} reaches only --allow-env names: anything else is 400 naming it; an allowed one works and is redacted', async () => {
      const s = await server();
      const session = await createSession(s, { environment: { KEY: '${RG_ALLOWED}' } });
      const refused = await s.client.call<{
        error: { code: string; issues: { path: string; rule: string }[] };
      }>('POST', `/v1/sessions/${session.session_id}/exec`, {
        body: { command: 'echo "$X" | rev', env: { X: '${RG_OTHER}' } },
      });
      expect(refused.status).toBe(400);
      expect(refused.body.error.code).toBe('E_ENV_NOT_ALLOWED');
      expect(refused.body.error.issues).toEqual([
        {
          path: 'env.X',
          rule: 'references ${RG_OTHER}, which this server does not allow (start it with --allow-env RG_OTHER)',
        },
      ]);
      const onCreate = await s.client.call<{ error: { issues: { path: string }[] } }>(
        'POST',
        '/v1/sessions',
        { body: { image: DRIVER_IMAGE, labels: LABEL, environment: { K: '${HOME}' } } },
      );
      expect([onCreate.status, onCreate.body.error.issues[0]?.path]).toEqual([400, 'environment.K']);
      const pair = await s.client.call<{ error: { code: string } }>('POST', '/v1/pairs', {
        body: {
          job_id: `${RUN}-p`,
          argv: ['true'],
          cwd: '/tmp/none',
          outcome_path: '/tmp/none/o.json',
          environment: { K: '${RG_OTHER}' },
          timeout_seconds: 10,
          image: DRIVER_IMAGE,
        },
      });
      expect([pair.status, pair.body.error.code]).toEqual([400, 'E_ENV_NOT_ALLOWED']);
      const allowed = await s.client.call<{ stdout: string }>(
        'POST',
        `/v1/sessions/${session.session_id}/exec`,
        { body: { command: 'echo "$KEY $Y"', env: { Y: '${RG_ALLOWED}' } } },
      );
      expect(allowed.body.stdout).toBe('[REDACTED] [REDACTED]\n');
      expect(JSON.stringify(refused.body)).not.toContain(OTHER);
    });

    it('--allow-env refuses PG*, ROBOGUIDE_* and the bearer token variable at start: exit 2 naming them', async () => {
      const run = (
        args: string[],
        env: Record<string, string> = {},
      ): Promise<{ code: number | null; stderr: string }> =>
        new Promise((resolve) => {
          const child = spawn(
            process.execPath,
            [BIN, 'serve', '--socket', `/tmp/${RUN}-never.sock`, ...args],
            { env: { PATH: process.env['PATH'] ?? '', HOME: process.env['HOME'] ?? '/tmp', ...env } },
          );
          let stderr = '';
          child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
          child.on('exit', (code) => resolve({ code, stderr }));
        });
      const pg = await run(['--allow-env', 'PGPASSWORD', '--allow-env', 'ROBOGUIDE_EVAL_SOCKET']);
      expect(pg.code).toBe(2);
      expect(pg.stderr).toContain('PGPASSWORD');
      expect(pg.stderr).toContain('ROBOGUIDE_EVAL_SOCKET');
      const token = randomUUID();
      const { mkdtemp, writeFile, rm } = await import('node:fs/promises');
      const dir = await mkdtemp(join('/tmp', 'rg-allow-'));
      await writeFile(join(dir, 'token'), token, { mode: 0o600 });
      const holder = await run(
        ['--listen', '127.0.0.1:0', '--token-file', join(dir, 'token'), '--allow-env', 'API_TOKEN'],
        { API_TOKEN: token },
      );
      await rm(dir, { recursive: true, force: true });
      expect(holder.code).toBe(2);
      expect(holder.stderr).toContain('API_TOKEN holds the server');
    });

    it('concurrent execs past --max-execs-per-session: 429 with Retry-After; the next one runs once a slot frees', async () => {
      const s = await server({ extraArgs: ['--max-execs-per-session', '1'] });
      const session = await createSession(s);
      const long = s.client.call('POST', `/v1/sessions/${session.session_id}/exec`, {
        body: { command: 'sleep 2' },
      });
      await sleep(500);
      const refused = await s.client.call<{ error: { code: string; message: string } }>(
        'POST',
        `/v1/sessions/${session.session_id}/exec`,
        { body: { command: 'true' } },
      );
      expect(refused.status).toBe(429);
      expect(refused.headers['retry-after']).toBe('1');
      expect(refused.body.error.message).toContain('--max-execs-per-session');
      expect((await long).status).toBe(200);
      expect(
        (
          await s.client.call('POST', `/v1/sessions/${session.session_id}/exec`, {
            body: { command: 'true' },
          })
        ).status,
      ).toBe(200);
    });

    it("containers that only carry serve's labels (no matching session.json/claim, or a duplicate id) are left alone by adoption and the reaper, and reported", async () => {
      const first = await server({ reapIntervalSec: 1 });
      const live = await createSession(first, { ttl_seconds: 600 });
      const labels = (await rt.docker.getContainer(live.container_id).inspect()).Config.Labels;
      const make = (extra: Record<string, string>) =>
        new PairDriverContainer()
          .withHang()
          .withLabels({ ...labels, ...LABEL, ...extra })
          .start();
      const strangers = [
        await make({ 'roboguide.job': `s-${randomUUID()}`, 'roboguide.claim': randomUUID() }),
        await make({}),
      ];
      const [stranger, twin] = strangers.map((c) => c.getId()) as [string, string];
      await first.kill('SIGKILL');
      const second = await server({ workDir: first.workDir, reapIntervalSec: 1 });
      expect(second.started.adopted).toEqual([live.session_id]);
      expect(second.started.reaped).toEqual([]);
      const foreign = new Map(second.started.foreign.map((f) => [f.container_id, f.reason]));
      expect(foreign.get(stranger)).toBe('no session.json for its session id');
      expect(foreign.get(twin)).toBe(
        'session.json names another container for this session (a duplicate id)',
      );
      expect(second.stderr()).toContain(twin);
      // Reaper passes (every second) and the deletion of the adopted session leave both alone.
      await sleep(3_000);
      expect((await second.client.call('DELETE', `/v1/sessions/${live.session_id}`)).status).toBe(200);
      expect(await rt.inspect(live.container_id)).toBeNull();
      expect(await second.kill('SIGTERM')).toBe(0);
      expect(
        (await containersLabelled({ ...LABEL, 'roboguide.batch': labels['roboguide.batch'] ?? '' })).sort(),
      ).toEqual([stranger, twin].sort());
      await Promise.all(strangers.map((c) => c.stop())); // each one's 404 confirmed
    }, 90_000);
  },
);
