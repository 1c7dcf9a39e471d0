// Issue 39: random and malformed requests at every route of the API (the routes of docs/openapi.json), seeded so a
// failure reproduces (SERVE_FUZZ_SEED=N), bounded in count and time: no 5xx, no host path in a body, nothing leaked.
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { serveBatchIdOf } from '../../src/testing/record-proof.js';
import { expectNoContainersLeft, startTestServer, type TestServer } from '../../src/testing/index.js';
import { DRIVER_IMAGE, noDocker } from '../support/docker.js';
import { rawRequest, type RawAnswer } from '../support/raw-http.js';
import { seededRandom } from '../support/seeded-random.js';

const SEED = Number(process.env['SERVE_FUZZ_SEED'] ?? Date.now() % 1_000_000);
const REQUESTS = 300;
const MAX_CREATES = 4;

const openapi = JSON.parse(readFileSync(new URL('../../docs/openapi.json', import.meta.url), 'utf8')) as {
  paths: Record<string, Record<string, unknown>>;
};
const ROUTES = Object.entries(openapi.paths).flatMap(([path, ops]) =>
  Object.keys(ops).map((method) => ({ method: method.toUpperCase(), path })),
);

type Random = () => number;
const pick = <T>(random: Random, items: readonly T[]): T => items[Math.floor(random() * items.length)]!;

function text(random: Random): string {
  return pick(random, [
    '',
    'x',
    'a b',
    'a\u0000b',
    '../../etc/passwd',
    '/tmp',
    '%zz',
    '\u00e9\ud83d\ude00',
    '${HOME}',
    'x'.repeat(Math.floor(random() * 5000)),
    String(random()),
  ]);
}

function value(random: Random, depth = 0): unknown {
  const kind = Math.floor(random() * (depth > 3 ? 5 : 8));
  switch (kind) {
    case 0:
      return text(random);
    case 1:
      return Math.floor(random() * 2 ** 40) * (random() < 0.5 ? -1 : 1);
    case 2:
      return random() < 0.5;
    case 3:
      return null;
    case 4:
      return random() * 1e308;
    case 5:
      return Array.from({ length: Math.floor(random() * 4) }, () => value(random, depth + 1));
    default:
      return Object.fromEntries(
        Array.from({ length: Math.floor(random() * 4) }, () => [text(random), value(random, depth + 1)]),
      );
  }
}

const FIELDS = [
  'image',
  'argv',
  'command',
  'cwd',
  'env',
  'secret_env',
  'user',
  'workdir',
  'timeout_sec',
  'labels',
  'ports',
  'mounts',
  'network',
  'ttl_seconds',
  'stdin',
  'stdin_base64',
  'environment',
  'cap_drop',
  'extra_hosts',
  'gpus',
];
const SAFE_ARGV = [['true'], ['echo', 'x'], ['sh', '-c', 'exit 3'], ['cat']];

/** A JSON body near the schemas: known fields with random or plausible values. */
function body(random: Random, createsLeft: () => boolean): unknown {
  const out: Record<string, unknown> = {};
  for (const field of FIELDS) if (random() < 0.25) out[field] = value(random);
  if (random() < 0.5) out['argv'] = random() < 0.7 ? pick(random, SAFE_ARGV) : value(random);
  if ('command' in out && random() < 0.5) out['command'] = 'echo hi';
  out['timeout_sec'] = 5;
  if (random() < 0.3) out['image'] = createsLeft() ? DRIVER_IMAGE : text(random);
  return out;
}

interface FuzzRequest {
  readonly method: string;
  readonly target: string;
  readonly type: string | null;
  readonly bytes: Buffer;
}

function request(random: Random, session: string, createsLeft: () => boolean): FuzzRequest {
  const route = pick(random, ROUTES);
  const method = random() < 0.9 ? route.method : pick(random, ['GET', 'POST', 'PUT', 'DELETE', 'PATCH']);
  const id = pick(random, [session, session, `s-${randomUUID()}`, 'nope', '%E0%A4%A', '%00', 'a%2Fb', '..']);
  const path = route.path.replace('{id}', id);
  const query = Array.from({ length: Math.floor(random() * 3) }, () => {
    const key = pick(random, [
      'path',
      'user',
      'mode',
      'stream',
      'ref',
      'tag',
      'follow',
      'dockerfile',
      'network',
    ]);
    const raw = pick(random, ['/tmp', 'a%00b', '%zz', '1', '0755', 'x'.repeat(300), 'root', 'busybox', '']);
    return `${key}=${raw}`;
  }).join('&');
  const shape = Math.floor(random() * 6);
  const bytes =
    shape === 0
      ? Buffer.alloc(0)
      : shape === 1
        ? Buffer.from(Array.from({ length: Math.floor(random() * 2000) }, () => Math.floor(random() * 256)))
        : shape === 2
          ? Buffer.from('['.repeat(Math.floor(random() * 200_000)))
          : Buffer.from(JSON.stringify(body(random, createsLeft)));
  const type = pick(random, [
    'application/json',
    'application/json',
    'application/json',
    null,
    'text/plain',
    'application/x-tar',
    'application/vnd.roboguide.exec-stream',
  ]);
  return { method, target: query === '' ? path : `${path}?${query}`, type, bytes };
}

describe.skipIf(noDocker)(`serve: fuzzing every route (seed ${SEED})`, () => {
  let s: TestServer;
  let session: string;

  beforeAll(async () => {
    process.stdout.write(`serve fuzz seed: ${SEED} (SERVE_FUZZ_SEED=${SEED} reproduces it)\n`);
    s = await startTestServer({ clientMode: 'raw' });
    const created = await s.client.call<{ session_id: string }>('POST', '/v1/sessions', {
      body: { image: DRIVER_IMAGE },
    });
    session = created.body.session_id;
  });
  afterAll(async () => {
    await s?.dispose();
  });

  it('no 5xx, no host path in any body, no container or slot left after', async () => {
    const random = seededRandom(SEED);
    let creates = 0;
    const createsLeft = (): boolean => creates < MAX_CREATES;
    const hostPaths = [s.workDir, '/var/lib/docker', 'overlay2', `${homedir()}/`];
    const failures: string[] = [];
    const started = Date.now();
    for (let i = 0; i < REQUESTS && Date.now() - started < 60_000; i++) {
      const r = request(random, session, createsLeft);
      if (r.bytes.includes(Buffer.from(DRIVER_IMAGE))) creates += 1;
      const head = [
        `${r.method} ${r.target} HTTP/1.1`,
        'Host: x',
        ...(r.type === null ? [] : [`Content-Type: ${r.type}`]),
        `Content-Length: ${r.bytes.length}`,
      ].join('\r\n');
      const answer: RawAnswer = await rawRequest(s.socketPath, head, r.bytes, { waitMs: 20_000 });
      const said = `#${i} ${r.method} ${r.target.slice(0, 80)} (${r.type}, ${r.bytes.length} B) → ${answer.status}`;
      if (answer.status === 0 || answer.status >= 500) failures.push(`${said} ${answer.body.slice(0, 300)}`);
      // The OpenAPI document is fixed text (its prose names folders such as /root/ as mount rules): not an answer.
      const fixed = r.target.startsWith('/v1/openapi.json') && answer.status === 200;
      const leaked = fixed ? undefined : hostPaths.find((p) => answer.body.includes(p));
      if (leaked !== undefined) failures.push(`${said}: host path ${leaked} in ${answer.body.slice(0, 300)}`);
    }
    expect(failures, `seed ${SEED}`).toEqual([]);
    // Every session the fuzz created is deleted; then nothing of this server is left on the engine or the registry.
    const listed = await s.client.call<{ sessions: { session_id: string }[] }>('GET', '/v1/sessions');
    for (const { session_id } of listed.body.sessions)
      expect((await s.client.call('DELETE', `/v1/sessions/${session_id}`)).status).toBe(200);
    await expectNoContainersLeft({ 'roboguide.batch': serveBatchIdOf(s.started.data_dir) });
    const registry = SqliteCapacityRegistry.open({ path: s.registryPath });
    try {
      expect(await registry.held()).toEqual([]);
    } finally {
      registry.closeSync();
    }
  }, 180_000);
});
