import { createServer, type AddressInfo } from 'node:net';
import { networkInterfaces } from 'node:os';
import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  PairDriverContainer,
  RoboguideServer,
  type StartedPairDriverContainer,
  type StartedRoboguideServer,
} from 'roboguide-eval/testing';

let pair: StartedPairDriverContainer;
let server: StartedRoboguideServer;

beforeAll(async () => {
  // The synthetic pair driver: built locally when missing (never pulled), NetworkMode "none".
  pair = await new PairDriverContainer().withHang().withLabels({ suite: 'consumer-example' }).start();
  // The real `serve` process on a temporary socket, data directory and registry.
  server = await new RoboguideServer().withEnvironment({ API_TOKEN: 'tok-123456' }).start();
});

afterAll(async () => {
  await server?.stop(); // SIGTERM: every session deleted; throws if a container of it is left
  await pair?.stop(); // removed, and the engine's 404 confirmed
});

it('the pair has no network: NetworkMode none, and no address of this host answers', async () => {
  const host = createServer((socket) => socket.end('host\n'));
  await new Promise<void>((resolve) => host.listen(0, '0.0.0.0', resolve));
  const { port } = host.address() as AddressInfo;
  try {
    expect((await pair.inspect()).HostConfig.NetworkMode).toBe('none');
    const addresses = Object.values(networkInterfaces())
      .flatMap((list) => list ?? [])
      .filter((a) => a.family === 'IPv4')
      .map((a) => a.address);
    for (const address of addresses) {
      const probe = await pair.exec([
        'sh',
        '-c',
        `nc -w 2 ${address} ${port} </dev/null && echo reached || echo unreachable`,
      ]);
      expect(`${address}: ${probe.stdout.trim()}`).toBe(`${address}: unreachable`);
    }
  } finally {
    host.close();
  }
});

it('runs a command in a session through the client, the secret masked', async () => {
  const { body: session } = await server.client.call<{ session_id: string }>('POST', '/v1/sessions', {
    body: {
      image: 'roboguide/pair-driver:1',
      environment: { TOKEN: '${API_TOKEN}' },
      labels: { suite: 'consumer-example' },
    },
  });
  const { body: out } = await server.client.call<{ stdout: string; return_code: number }>(
    'POST',
    `/v1/sessions/${session.session_id}/exec`,
    { body: { command: 'echo "$TOKEN"; exit 3' } },
  );
  expect(out).toMatchObject({ stdout: '[REDACTED]\n', return_code: 3 });
  await server.client.call('DELETE', `/v1/sessions/${session.session_id}`);
});
