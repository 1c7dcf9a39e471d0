import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EgressRecord } from '../../src/core/egress/record.js';
import { startServe, type RunningServe } from '../../src/serve-root.js';
import { ApiClient } from '../../src/testing/api-client.js';
import { DRIVER_IMAGE, noDocker } from '../support/docker.js';
import { ALLOWED, OTHER, startEgressWorld, type EgressWorld } from '../support/egress-session-world.js';
import { clientHello, HELPERS } from '../support/egress-pair.js';
import { fakeLogger } from '../support/fakes.js';
import { namespaceSupportProblem } from '../support/second-engine.js';

/**
 * A serve session's egress (issue 42, docs/spec.md §5.6 "Sessions"): created allowlisted, switched by
 * PUT /v1/sessions/{id}/egress between open, allowlist and none while it runs. After each 200 a new connection obeys
 * the new policy (the upstream's own log says what arrived); the session's egress.jsonl holds every attempt made
 * through or around the proxy, masked. A throwaway engine with its own firewall: nothing here touches this machine's.
 */
const required = process.env['REQUIRE_DOCKER'] === '1';
const namespaceProblem = noDocker ? 'no Docker engine' : await namespaceSupportProblem();
const skip = namespaceProblem !== null && !required;
if (skip) console.warn(`\n*** session egress on a throwaway engine SKIPPED: ${namespaceProblem} ***\n`);

const SECRET = `sk-sess-${randomUUID()}`;
const ALLOW = { mode: 'allowlist', allow: ['allowed.test'], methods: ['GET'] };

interface ExecOut {
  readonly exit_code: number;
  readonly stdout: string;
}

describe.skipIf(skip)('session egress: allowlisted at create, switched live by PUT …/egress', () => {
  let world: EgressWorld;
  let serve: RunningServe;
  let api: ApiClient;

  beforeAll(async () => {
    if (namespaceProblem !== null) throw new Error(`REQUIRE_DOCKER=1 but: ${namespaceProblem}`);
    world = await startEgressWorld('sesseg');
    serve = await startServe({
      socketPath: join(world.work, 'serve.sock'),
      dataDir: join(world.work, 'data'),
      registryPath: join(world.work, 'registry.db'),
      bindAddress: '0.0.0.0',
      environment: { API_TOKEN: SECRET },
      allowEnv: ['API_TOKEN'],
      version: 'test',
      logger: fakeLogger(),
      runtime: world.runtime,
      egress: world.gate,
    });
    api = new ApiClient(serve.socketPath);
  }, 240_000);

  afterAll(async () => {
    await serve?.shutdown();
    await world?.dispose();
  }, 120_000);

  const sh = async (id: string, script: string): Promise<ExecOut> =>
    (
      await api.call<ExecOut>('POST', `/v1/sessions/${id}/exec`, {
        body: { argv: ['/bin/sh', '-c', `${HELPERS}\n${script}`], timeout_sec: 60 },
      })
    ).body;
  /** A plain request through the proxy named by HTTP_PROXY (as the exec sees it now). */
  const viaProxy = (id: string, host: string) =>
    sh(id, `req r "GET http://${host}/?k=$API_TOKEN" ${host}; cat out-r; rm -f out-r`);
  /** A TCP connection made directly (no proxy). */
  const direct = (id: string, address: string) =>
    sh(id, `printf 'GET / HTTP/1.0\\r\\nHost: d\\r\\n\\r\\n' | timeout 6 nc -w 3 ${address} 80 2>&1; true`);
  const put = (id: string, body: unknown) =>
    api.raw.call<Record<string, unknown>>('PUT', `/v1/sessions/${id}/egress`, { body });

  it('a session created allowlisted reaches its host only; PUT open → allowlist → none switches it, each in force after the 200', async () => {
    const created = await api.call<{ session_id: string }>('POST', '/v1/sessions', {
      body: {
        image: DRIVER_IMAGE,
        environment: { API_TOKEN: '${API_TOKEN}' },
        egress: ALLOW,
        ttl_seconds: 600,
      },
    });
    const id = created.body.session_id;
    const detail = await api.call<{ egress: unknown }>('GET', `/v1/sessions/${id}`);
    expect(detail.body.egress).toEqual(ALLOW);

    // Allowlisted: the allowed host through the proxy; another host refused; a direct connection reaches nothing.
    expect((await viaProxy(id, 'allowed.test')).stdout).toContain(`upstream ${ALLOWED} GET allowed.test`);
    expect((await viaProxy(id, 'other.test')).stdout).toMatch(/^HTTP\/1\.1 403/);
    expect((await direct(id, OTHER)).stdout).not.toContain('upstream');

    // Open (the set-up phase): a direct connection to any host; no proxy in the exec's environment.
    const open = await put(id, { mode: 'open' });
    expect(open.status).toBe(200);
    expect(open.body).toEqual({ mode: 'open' });
    expect((await direct(id, OTHER)).stdout).toContain(`upstream ${OTHER}`);
    expect((await sh(id, 'printf "[%s]" "$HTTP_PROXY"')).stdout).toBe('[]');

    // Allowlist again (the agent phase): the next connection obeys it.
    expect((await put(id, ALLOW)).status).toBe(200);
    expect((await direct(id, OTHER)).stdout).not.toContain('upstream');
    expect((await viaProxy(id, 'other.test')).stdout).toMatch(/^HTTP\/1\.1 403/);
    expect((await viaProxy(id, 'allowed.test')).stdout).toContain(`upstream ${ALLOWED} GET allowed.test`);

    // A narrower allowlist closes a tunnel opened under the wider one (decided once, at its CONNECT): its record (made
    // when it closed) is from before the PUT's answer, not from when its client let go (15 s later).
    await api.call('PUT', '/v1/sessions/' + id + '/file?path=/tmp/hello.bin', {
      raw: await clientHello('allowed.test'),
    });
    const tunnel = sh(
      id,
      `s=$(date +%s); (printf 'CONNECT allowed.test:443 HTTP/1.1\\r\\nHost: allowed.test:443\\r\\nProxy-Authorization: Basic %s\\r\\n\\r\\n' "$AUTH"; sleep 1; cat /tmp/hello.bin; sleep 15) | timeout 40 nc $PH $PP > out-t 2>&1; echo "ended after $(( $(date +%s) - s ))"`,
    );
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    const narrowed = await put(id, { mode: 'allowlist', allow: ['api.anthropic.test'] });
    const answeredAt = Date.now();
    expect(narrowed.status).toBe(200);
    await tunnel;
    expect((await viaProxy(id, 'allowed.test')).stdout).toMatch(/^HTTP\/1\.1 403/);

    // None: nothing, through the proxy or around it.
    expect((await put(id, { mode: 'none' })).body).toEqual({ mode: 'none' });
    expect((await direct(id, OTHER)).stdout).not.toContain('upstream');
    expect((await viaProxy(id, 'allowed.test')).stdout).not.toContain('upstream');
    expect((await api.call<{ egress: unknown }>('GET', `/v1/sessions/${id}`)).body.egress).toEqual({
      mode: 'none',
    });

    // A bad policy names its field; nothing changes.
    const bad = await put(id, { mode: 'allowlist', allow: ['*.com'] });
    expect(bad.status).toBe(400);
    expect(JSON.stringify(bad.body)).toContain('allow[0]');

    await api.call('DELETE', `/v1/sessions/${id}`);
    const text = await readFile(join(serve.dataDir, 'sessions', id, 'egress.jsonl'), 'utf8');
    expect(text).not.toContain(SECRET);
    const records = text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as EgressRecord);
    const count = (via: string, host: string | null, decision: string, reason?: string) =>
      records.filter(
        (r) =>
          r.via === via &&
          (host === null || r.host === host || r.address === host) &&
          r.decision === decision &&
          (reason === undefined || r.reason === reason),
      ).length;
    expect(count('http', 'allowed.test', 'allowed')).toBe(2);
    expect(count('http', 'other.test', 'refused', 'host_not_allowed')).toBe(2);
    expect(count('http', 'allowed.test', 'refused', 'host_not_allowed')).toBe(1);
    expect(count('tcp', OTHER, 'refused', 'not_through_proxy')).toBe(2);
    const tunnelRecord = records.find((r) => r.via === 'connect' && r.decision === 'allowed');
    expect(tunnelRecord).toMatchObject({ host: 'allowed.test', sni: 'allowed.test' });
    expect(Date.parse(tunnelRecord?.time ?? '')).toBeLessThanOrEqual(answeredAt + 1_000);
    // What reached the internet: the two allowed requests, and the one direct connection made while open.
    const upstream = await world.upstream();
    expect(
      upstream.filter((l) => l.startsWith('request ')).map((l) => l.split(' ').slice(0, 4).join(' ')),
    ).toEqual([
      `request ${ALLOWED}:80 GET allowed.test`,
      `request ${OTHER}:80 GET d`,
      `request ${ALLOWED}:80 GET allowed.test`,
    ]);
  }, 300_000);

  it('a session created open has no proxy until it is allowlisted; an allowlist without a proxy is refused by name', async () => {
    const created = await api.call<{ session_id: string }>('POST', '/v1/sessions', {
      body: { image: DRIVER_IMAGE, network: 'bridge', ttl_seconds: 600 },
    });
    const id = created.body.session_id;
    expect((await api.call<{ egress: unknown }>('GET', `/v1/sessions/${id}`)).body.egress).toEqual({
      mode: 'open',
    });
    expect((await direct(id, OTHER)).stdout).toContain(`upstream ${OTHER}`);
    expect((await put(id, ALLOW)).status).toBe(200);
    expect((await direct(id, OTHER)).stdout).not.toContain('upstream');
    expect((await viaProxy(id, 'allowed.test')).stdout).toContain(`upstream ${ALLOWED}`);
    await api.call('DELETE', `/v1/sessions/${id}`);
    const conflict = await api.raw.call('POST', '/v1/sessions', {
      body: { image: DRIVER_IMAGE, network: 'bridge', egress: { mode: 'none' } },
    });
    expect(conflict.status).toBe(400);
    expect(JSON.stringify(conflict.body)).toContain('egress.mode');
  }, 300_000);
});
