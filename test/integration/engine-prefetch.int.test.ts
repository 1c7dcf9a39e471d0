import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { engineUnixSocket } from '../../src/adapters/docker/engine-probe.js';
import { cli } from '../support/cli.js';
import { DRIVER_IMAGE, noDocker } from '../support/docker.js';

/**
 * `pair run`'s engine prefetch (issue 26, start-up): the launcher asks the engine's info and version before the CLI
 * loads and the command's first engine call takes those answers. Seen through a proxy in front of the real engine
 * that records every request (and can hold an answer back).
 */
let work: string;
let engine: string;

interface Proxy {
  readonly path: string;
  /** The request lines seen, `GET /info` and so on, in order. */
  readonly requests: string[];
  close(): Promise<void>;
}

/**
 * A unix socket forwarding each connection to the engine, recording request lines; the answer to a request whose
 * path ends with `holdPath` reaches the client `holdMs` later. `silent`: accepts, records, never answers.
 */
async function proxy(name: string, options: { holdPath?: string; holdMs?: number; silent?: boolean } = {}) {
  const path = join(work, name);
  const requests: string[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    sockets.add(client);
    client.on('close', () => sockets.delete(client));
    client.on('error', () => undefined);
    let hold = 0;
    const upstream = options.silent ? null : connect(engine);
    upstream?.on('error', () => client.destroy());
    upstream?.on('data', (chunk) => {
      if (hold === 0) client.write(chunk);
      else setTimeout(() => client.write(chunk), hold);
    });
    upstream?.on('end', () => setTimeout(() => client.end(), hold));
    client.on('data', (chunk) => {
      for (const m of chunk.toString('latin1').matchAll(/^(GET|POST|PUT|DELETE|HEAD) (\S+) HTTP/gm)) {
        requests.push(`${m[1]} ${m[2]}`);
        if (options.holdPath !== undefined && m[2]!.split('?')[0]!.endsWith(options.holdPath))
          hold = options.holdMs ?? 0;
      }
      upstream?.write(chunk);
    });
    client.on('end', () => upstream?.end());
  });
  await new Promise<void>((resolve) => server.listen(path, resolve));
  return {
    path,
    requests,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  } satisfies Proxy;
}

/** A no-op pair's spec, and the `pair run` arguments for it. */
async function noOpPair(id: string): Promise<string[]> {
  const base = join(work, id);
  await mkdir(join(base, 'cwd'), { recursive: true });
  const spec = join(base, 'spec.json');
  await writeFile(
    spec,
    JSON.stringify({
      job_id: id,
      argv: ['/opt/driver/run', 'outcome=completed'],
      cwd: join(base, 'cwd'),
      outcome_path: join(base, 'out', 'outcome.json'),
      timeout_seconds: 60,
      image: DRIVER_IMAGE,
    }),
  );
  return [
    'pair',
    'run',
    '--spec',
    spec,
    '--output',
    join(base, 'evidence'),
    '--registry',
    join(base, 'reg.db'),
  ];
}

/** How many requests were for `path` (with or without an API version before it). */
const count = (requests: readonly string[], path: string) =>
  requests.filter((r) => r.split('?')[0]!.endsWith(path)).length;

describe.skipIf(noDocker)("pair run's engine prefetch", () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-prefetch-'));
    const socket = await engineUnixSocket();
    if (socket === null) throw new Error('these tests need the engine on a unix socket');
    engine = socket;
  });
  afterAll(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it('asks info and version first, once each: the command takes those answers instead of asking again', async () => {
    const p = await proxy('once.sock');
    try {
      const run = await cli(await noOpPair('once'), { env: { DOCKER_HOST: `unix://${p.path}` } });
      expect(run.stderr).toBe('');
      expect(run.code).toBe(0);
      expect(run.stdout).toContain('pair once: completed');
      // The code version the build recorded (dist/build-info.json), not asked of git by the command.
      const built = JSON.parse(await readFile('dist/build-info.json', 'utf8')) as {
        version: string;
        commit: string | null;
        dirty: boolean;
      };
      const receipt = JSON.parse(await readFile(join(work, 'once', 'evidence', 'receipt.json'), 'utf8')) as {
        code_version: string;
      };
      expect(receipt.code_version).toBe(
        built.commit === null
          ? built.version
          : `${built.version}+${built.commit}${built.dirty ? '.dirty' : ''}`,
      );
      expect(p.requests.slice(0, 2).sort()).toEqual(['GET /info', 'GET /version']);
      expect(count(p.requests, '/info')).toBe(1);
      expect(count(p.requests, '/version')).toBe(1);
    } finally {
      await p.close();
    }
  });

  it("without DOCKER_HOST, on the default socket (the user's ~/.docker/run/docker.sock here), taken as well", async () => {
    const home = join(work, 'home');
    await mkdir(join(home, '.docker', 'run'), { recursive: true });
    const p = await proxy(join('home', '.docker', 'run', 'docker.sock'));
    try {
      const run = await cli(await noOpPair('default-socket'), {
        env: { DOCKER_HOST: undefined, HOME: home },
      });
      expect(run.stderr).toBe('');
      expect(run.code).toBe(0);
      expect(p.requests.slice(0, 2).sort()).toEqual(['GET /info', 'GET /version']);
      expect(count(p.requests, '/info')).toBe(1);
      expect(count(p.requests, '/version')).toBe(1);
    } finally {
      await p.close();
    }
  });

  it('an engine slow to answer info: the command waits for that answer (the process is not let go early)', async () => {
    const p = await proxy('slow.sock', { holdPath: '/info', holdMs: 1_500 });
    try {
      const run = await cli(await noOpPair('slow'), { env: { DOCKER_HOST: `unix://${p.path}` } });
      expect(run.stderr).toBe('');
      expect(run.code).toBe(0);
      const result = JSON.parse(await readFile(join(work, 'slow', 'evidence', 'result.json'), 'utf8')) as {
        classification: string;
      };
      expect(result.classification).toBe('completed');
      expect(count(p.requests, '/info')).toBe(1);
    } finally {
      await p.close();
    }
  });

  it('an invalid spec exits 2 at once though the engine never answers the prefetch; --help asks nothing', async () => {
    const p = await proxy('silent.sock', { silent: true });
    try {
      const bad = join(work, 'bad.json');
      await writeFile(bad, JSON.stringify({ job_id: '../x' }));
      // Held by the prefetch, the process would wait for its 10 s timeout: SIGKILLed at 8 s instead.
      const run = await cli(['pair', 'run', '--spec', bad], {
        env: { DOCKER_HOST: `unix://${p.path}` },
        timeoutMs: 8_000,
      });
      expect(run.signal).toBeNull();
      expect(run.code).toBe(2);
      expect(run.stderr).toContain('job_id');
      // The prefetch was sent (what arrived before the exit: at least one of its two requests, nothing else).
      expect(p.requests.length).toBeGreaterThan(0);
      expect(p.requests.filter((r) => r !== 'GET /info' && r !== 'GET /version')).toEqual([]);

      p.requests.length = 0;
      const help = await cli(['pair', 'run', '--help'], { env: { DOCKER_HOST: `unix://${p.path}` } });
      expect(help.code).toBe(0);
      expect(p.requests).toEqual([]);
    } finally {
      await p.close();
    }
  });
});
