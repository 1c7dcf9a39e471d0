// The README's example suite for `roboguide-eval/testing`, kept here verbatim so it stays true.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { PairDriverContainer, RoboguideServer, type StartedRoboguideServer } from 'roboguide-eval/testing';
import { noDocker } from '../support/docker.js';

let server: StartedRoboguideServer;
beforeAll(async () => {
  if (noDocker) return;
  server = await new RoboguideServer().withEnvironment({ API_TOKEN: 'tok-123456' }).start();
});
afterAll(async () => {
  if (noDocker) return;
  await server.stop(); // SIGTERM: every session deleted (verified); throws if a container of it is left
});

it.skipIf(noDocker)('runs a command in a session, with the secret masked', async () => {
  const { body: s } = await server.client.call<{ session_id: string }>('POST', '/v1/sessions', {
    body: { image: 'roboguide/pair-driver:1', environment: { TOKEN: '${API_TOKEN}' } },
  });
  const { body: out } = await server.client.call<{ stdout: string }>(
    'POST',
    `/v1/sessions/${s.session_id}/exec`,
    {
      body: { command: 'echo "$TOKEN"' },
    },
  );
  expect(out.stdout).toBe('[REDACTED]\n');
  await server.client.call('DELETE', `/v1/sessions/${s.session_id}`);
});

it.skipIf(noDocker)('a pair container has no network, and is removed at the end of its block', async () => {
  await using pair = await new PairDriverContainer().withHang().start(); // built here if missing, never pulled
  expect((await pair.inspect()).HostConfig.NetworkMode).toBe('none');
});
