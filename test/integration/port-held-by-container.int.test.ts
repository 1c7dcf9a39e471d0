import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Wait } from 'testcontainers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runPair } from '../../src/app/pair/run-pair.js';
import { PairDriverContainer, type StartedPairDriverContainer } from '../../src/testing/index.js';
import { containersLabelled, DRIVER_IMAGE, noDocker, pairRunDeps, runtime } from '../support/docker.js';

// No reaper image can be pulled here: testcontainers runs without Ryuk; the kit's owner sweep stands in for it.
process.env['TESTCONTAINERS_RYUK_DISABLED'] = 'true';
const HELPER_LABEL = { 'roboguide.test': `port-helper-${randomUUID().slice(0, 8)}` };

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** A port published by ANOTHER container: the engine's "port is already allocated", not a plain bind error. */
describe.skipIf(noDocker)('a port already published by another container', () => {
  let helper: StartedPairDriverContainer;
  let port: number;
  let work: string;

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-port-'));
    port = await freePort();
    // The kit's pair container, on the bridge here (its default is no network) so that it can publish the port.
    helper = await new PairDriverContainer()
      .withNetworkMode('bridge')
      .withScript('echo ready; exec sleep 300')
      .withExposedPorts({ container: port, host: port })
      .withLabels(HELPER_LABEL)
      .withWaitStrategy(Wait.forLogMessage('ready'))
      .start();
  });
  afterAll(async () => {
    await helper?.stop(); // removed, its 404 confirmed
    expect(await containersLabelled(HELPER_LABEL)).toEqual([]);
    await rm(work, { recursive: true, force: true });
  });

  it('fails the pair with port_allocated, keeps the engine text, and leaves no container of ours', async () => {
    const jobId = `it-port-ctr-${randomUUID().slice(0, 6)}`;
    const { result } = await runPair(pairRunDeps(), {
      specText: JSON.stringify({
        job_id: jobId,
        argv: ['/opt/driver/run', 'outcome=completed'],
        cwd: join(work, 'cwd'),
        outcome_path: join(work, 'out', 'o.json'),
        ports: [port],
        image: DRIVER_IMAGE,
      }),
      specSource: 'spec.json',
      output: join(work, 'evidence'),
      bindAddress: '127.0.0.1',
      environment: {},
      codeVersion: 'test',
      cwd: work,
    });
    expect(result.classification).toBe('infrastructure_failure');
    expect(result.reasons).toContain('port_allocated');
    // testcontainers publishes on 0.0.0.0 and we bind 127.0.0.1, so the engine reports the proxy's bind failure.
    expect(result.engine_error?.message).toMatch(/port is already allocated|address already in use/);
    expect(await containersLabelled({ 'roboguide.job': jobId })).toEqual([]);
    // The helper is untouched: removing our container never touches another's.
    expect((await runtime().inspect(helper.getId()))?.status).toBe('running');
  });
});
