// The README's example suite for `roboguide-eval/testing`, kept here verbatim so it stays true.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { buildPairDriverImage, expectNoContainersLeft, startTestServer, type TestServer } from 'roboguide-eval/testing';
import { noDocker } from '../support/docker.js';

let server: TestServer;
beforeAll(async () => {
  if (noDocker) return;
  await buildPairDriverImage(); // FROM scratch + the host's static busybox: no network, no pull
  server = await startTestServer({ env: { API_TOKEN: 'tok-123456' } });
});
afterAll(async () => {
  if (noDocker) return;
  await server.dispose(); // SIGTERM: the server deletes every session (verified) before it exits
  await expectNoContainersLeft({ suite: 'readme-example' });
});

it.skipIf(noDocker)('runs a command in a session, with the secret masked', async () => {
  const { body: s } = await server.client.call<{ session_id: string }>('POST', '/v1/sessions', {
    body: { image: 'roboguide/pair-driver:1', environment: { TOKEN: '${API_TOKEN}' }, labels: { suite: 'readme-example' } },
  });
  const { body: out } = await server.client.call<{ stdout: string }>('POST', `/v1/sessions/${s.session_id}/exec`, {
    body: { command: 'echo "$TOKEN"' },
  });
  expect(out.stdout).toBe('[REDACTED]\n');
  await server.client.call('DELETE', `/v1/sessions/${s.session_id}`);
});
