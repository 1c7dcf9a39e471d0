import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../../src/adapters/system-clock.js';
import { DockerContainerRuntime } from '../../src/adapters/docker/docker-container-runtime.js';
import { removeAndVerify } from '../../src/app/pair/remove-and-verify.js';
import { silentLogger } from '../../src/app/ports/logger.js';

/** An "engine" that accepts connections and never answers: a hung dockerd. */
let server: Server;
let dir: string;
const sockets: Socket[] = [];

describe('engine calls against a hung engine', () => {
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'rg-hung-'));
    server = createServer((s) => sockets.push(s));
    await new Promise<void>((resolve) => server.listen(join(dir, 'docker.sock'), resolve));
  });
  afterAll(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => server.close(resolve));
    rmSync(dir, { recursive: true, force: true });
  });

  it('a short call fails with a typed engine error instead of hanging', async () => {
    const rt = new DockerContainerRuntime({ socketPath: join(dir, 'docker.sock') }, { callTimeoutMs: 150 });
    await expect(rt.inspect('c1')).rejects.toMatchObject({ code: 'E_ENGINE', fault: 'engine_error' });
    await expect(rt.remove('c1')).rejects.toMatchObject({ code: 'E_ENGINE' });
  });

  it('the cleanup path ends, reporting the removal unverified (the slot stays held)', async () => {
    const rt = new DockerContainerRuntime({ socketPath: join(dir, 'docker.sock') }, { callTimeoutMs: 100 });
    const cleanup = await removeAndVerify(
      { runtime: rt, logger: silentLogger, verifyAbsentTimeoutMs: 300, clock: systemClock },
      'c1',
      1,
    );
    expect(cleanup).toMatchObject({ verified_absent: false, attempts: 3 });
  });
});
