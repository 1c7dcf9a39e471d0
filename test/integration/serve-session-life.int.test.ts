// Issue 39: a session is as alive as its container; execs cut by a shutdown or left by a killed server say so.
import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { expectNoContainersLeft, startTestServer, type TestServer } from '../../src/testing/index.js';
import { DRIVER_IMAGE, noDocker, runtime } from '../support/docker.js';
import { until } from '../support/until.js';

const RUN = `it-life-${randomUUID().slice(0, 8)}`;
const LABEL = { 'it.life': RUN };
const rt = runtime();
const servers: TestServer[] = [];

async function server(workDir?: string): Promise<TestServer> {
  const s = await startTestServer({ clientMode: 'raw', ...(workDir ? { workDir } : {}) });
  servers.push(s);
  return s;
}

async function create(s: TestServer): Promise<{ session_id: string; container_id: string }> {
  const res = await s.client.call<{ session_id: string; container_id: string }>('POST', '/v1/sessions', {
    body: { image: DRIVER_IMAGE, labels: LABEL },
  });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body;
}

async function heldSlots(s: TestServer): Promise<number> {
  const registry = SqliteCapacityRegistry.open({ path: s.registryPath });
  try {
    return (await registry.held()).length;
  } finally {
    registry.closeSync();
  }
}

/** Execs the engine says are running in the container. */
async function runningExecs(containerId: string): Promise<number> {
  const info = await rt.docker.getContainer(containerId).inspect();
  let running = 0;
  for (const id of info.ExecIDs ?? []) if ((await rt.docker.getExec(id).inspect()).Running) running += 1;
  return running;
}

describe.skipIf(noDocker)('serve: session life (issue 39), real engine', () => {
  afterAll(async () => {
    await Promise.all(servers.map((s) => s.dispose()));
    await expectNoContainersLeft(LABEL);
  });

  it('docker kill and docker rm -f end the session: 410 with the reason, container gone, slot released', async () => {
    const s = await server();
    const killed = await create(s);
    const removed = await create(s);
    expect(await heldSlots(s)).toBe(2);
    await rt.docker.getContainer(killed.container_id).kill();
    await rt.docker.getContainer(removed.container_id).remove({ force: true });
    const ended = await until(async () => {
      const res = await s.client.call<{ error: { code: string; message: string } }>(
        'GET',
        `/v1/sessions/${killed.session_id}`,
      );
      return res.status === 410 ? res.body.error : undefined;
    }, 'the killed session answers 410');
    expect(ended.code).toBe('E_SESSION_ENDED');
    expect(ended.message).toContain('exited');
    const exec = await s.client.call('POST', `/v1/sessions/${removed.session_id}/exec`, {
      body: { argv: ['true'] },
    });
    expect(exec.status).toBe(410);
    await until(async () => ((await heldSlots(s)) === 0 ? true : undefined), 'both slots released');
    expect(await rt.inspect(killed.container_id)).toBeNull();
    const cleanup = await s.client.call<{ reason: string }>('DELETE', `/v1/sessions/${removed.session_id}`);
    // rm -f of a running container: the engine says `die` (killed) before `destroy`, but the container was removed.
    expect(cleanup.body.reason).toBe('gone');
  });

  it('docker rm -f with an exec running: the exec answers interrupted session_ended, the session reads gone', async () => {
    const s = await server();
    const { session_id, container_id } = await create(s);
    const exec = s.client.call<{ return_code: number | null; interrupted: string | null }>(
      'POST',
      `/v1/sessions/${session_id}/exec`,
      { body: { argv: ['sleep', '300'] } },
    );
    await until(async () => ((await runningExecs(container_id)) > 0 ? true : undefined), 'the exec runs');
    await rt.docker.getContainer(container_id).remove({ force: true });
    const answer = await exec;
    expect(answer.status).toBe(200);
    expect(answer.body.interrupted).toBe('session_ended');
    const ended = await s.client.call<{
      error: { code: string; message: string; issues: { rule: string }[] };
    }>('GET', `/v1/sessions/${session_id}`);
    expect([ended.status, ended.body.error.code, ended.body.error.issues[0]?.rule]).toEqual([
      410,
      'E_SESSION_ENDED',
      'gone',
    ]);
    expect(ended.body.error.message).toContain('removed');
    await until(async () => ((await heldSlots(s)) === 0 ? true : undefined), 'the slot released');
  });

  it('SIGTERM with an exec running: the exec answers interrupted server_stopping', async () => {
    const s = await server();
    const { session_id, container_id } = await create(s);
    const exec = s.client.call<{ return_code: number; interrupted: string | null }>(
      'POST',
      `/v1/sessions/${session_id}/exec`,
      { body: { argv: ['sleep', '300'] } },
    );
    await until(async () => ((await runningExecs(container_id)) > 0 ? true : undefined), 'the exec runs');
    const stopped = s.stop('SIGTERM');
    const answer = await exec;
    expect(answer.status).toBe(200);
    expect(answer.body.interrupted).toBe('server_stopping');
    expect(await stopped).toBe(0);
  });

  it('SIGKILL with an exec running: the restarted server adopts the session, ends the exec and records it', async () => {
    const first = await server();
    const { session_id, container_id } = await create(first);
    const exec = first.client
      .call('POST', `/v1/sessions/${session_id}/exec`, { body: { argv: ['sleep', '300'] } })
      .catch(() => null);
    await until(async () => ((await runningExecs(container_id)) > 0 ? true : undefined), 'the exec runs');
    await first.stop('SIGKILL');
    await exec;
    const second = await server(first.workDir);
    expect(second.started.adopted).toEqual([session_id]);
    expect(second.started.ended_execs).toBe(1);
    expect(await runningExecs(container_id)).toBe(0);
    const lines = (await readFile(join(second.dataDir, 'sessions', session_id, 'execs.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines).toContainEqual(
      expect.objectContaining({ argv: ['sleep', '300'], orphaned: true, killed: 'server_restarted' }),
    );
    expect((await second.client.call('DELETE', `/v1/sessions/${session_id}`)).status).toBe(200);
  });
});
