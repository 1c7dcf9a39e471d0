// The test kit's testcontainers modules against the real engine: PairDriverContainer (no network, typed driver
// actions, stop() confirms the 404), RoboguideServer (`await using`), and the owner sweep that replaces Ryuk here.
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { GenericContainer } from 'testcontainers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hostname } from 'node:os';
import { currentProcessIdentity, readProcessStartTicks } from '../../src/adapters/host-identity.js';
import {
  PairDriverContainer,
  RoboguideServer,
  sweepTestKitLeftovers,
  TESTKIT_LABEL,
  TESTKIT_OWNER_LABEL,
  type StartedRoboguideServer,
} from '../../src/testing/index.js';
import { containersLabelled, noDocker, runtime, sweep } from '../support/docker.js';

const RUN = { 'roboguide.test': `kit-${randomUUID().slice(0, 8)}` };
/** Sessions take the caller's labels, but not under roboguide.* (reserved). */
const SESSION_LABEL = { 'kit.test': RUN['roboguide.test'] };

describe.skipIf(noDocker)('PairDriverContainer', () => {
  let listener: Server;
  let port: number;
  beforeAll(async () => {
    // A host service every bridge container can reach at the engine's gateway: what "no network" must not reach.
    listener = createServer((socket) => socket.end('host-service\n'));
    await new Promise<void>((resolve) => listener.listen(0, '0.0.0.0', resolve));
    port = (listener.address() as { port: number }).port;
  });
  afterAll(async () => {
    listener.close();
    await sweep(RUN);
  });

  it('has no network by default (NetworkMode none, only lo, the host unreachable); the same probe works on the bridge', async () => {
    const isolated = await new PairDriverContainer().withHang().withLabels(RUN).start();
    const bridged = await new PairDriverContainer()
      .withNetworkMode('bridge')
      .withHang()
      .withLabels(RUN)
      .start();
    // The host as a bridge container sees it: its own gateway. Not the bridge network's IPAM config, whose Gateway
    // a freshly installed engine leaves empty (the address is only on docker0).
    const gateway = (await bridged.inspect()).NetworkSettings.Networks['bridge']?.Gateway ?? '';
    expect(gateway).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    const probe = `nc -w 2 ${gateway} ${port} </dev/null && echo reached || echo unreachable`;
    try {
      expect((await isolated.inspect()).HostConfig.NetworkMode).toBe('none');
      expect((await isolated.exec(['sh', '-c', "ip -o link | cut -d: -f2 | tr -d ' '"])).output.trim()).toBe(
        'lo',
      );
      expect((await isolated.exec(['sh', '-c', probe])).stdout.trim()).toBe('unreachable');
      expect((await bridged.exec(['sh', '-c', probe])).stdout).toContain('reached');
    } finally {
      await Promise.all([isolated.stop(), bridged.stop()]);
    }
  });

  it("runs the driver's actions in order: the secret echo, then the exit code; stop() confirms the engine's 404", async () => {
    const driver = await new PairDriverContainer()
      .withEnvironment({ TOKEN: 'tok-abcdef123456' })
      .withSecretEcho('TOKEN')
      .withOutcome('infra')
      .withExitCode(7)
      .withLabels(RUN)
      .start();
    expect(await driver.waitForExit()).toBe(7);
    const { stdout, stderr } = await driver.output();
    expect(stdout).toContain('raw: tok-abcdef123456\n');
    expect(stdout).toContain('Authorization: Bearer tok-abcdef123456\n');
    expect(stderr).toBe('stderr: tok-abcdef123456\n');
    expect((await driver.inspect()).Config.Labels).toMatchObject({
      ...RUN,
      'roboguide.testkit': 'pair-driver',
    });
    await driver.stop();
    await expect(driver.inspect()).rejects.toMatchObject({ statusCode: 404 });
    await driver.stop(); // twice: still gone, no error
    expect(await containersLabelled(RUN)).toEqual([]);
  });

  it('refuses a bad action before anything starts, naming the method and the rule', () => {
    expect(() => new PairDriverContainer().withExitCode(256)).toThrow(
      'PairDriverContainer.withExitCode: must be an integer from 0 to 255 (got 256)',
    );
    expect(() => new PairDriverContainer().withSecretEcho('X;reboot')).toThrow(
      /withSecretEcho: must be a variable name/,
    );
    expect(() => new PairDriverContainer().withOutcome('done' as 'completed')).toThrow(
      /withOutcome: must be one of completed, infra/,
    );
    expect(
      new PairDriverContainer()
        .withSession({ echoEnv: 'KEY' })
        .withOutputBytes('stderr', 64, { big: true })
        .command(),
    ).toEqual(['/opt/driver/run', 'session=echo_env=KEY', 'big_stderr=64']);
  });
});

describe.skipIf(noDocker)('the owner sweep (what replaces Ryuk here)', () => {
  it("removes a container of the kit (its kind label) whose owner process is gone; leaves a live owner's and one with an owner label only", async () => {
    const child = spawn('sleep', ['0.2']);
    const exited = new Promise((resolve) => child.once('exit', resolve));
    const me = await currentProcessIdentity();
    const dead = {
      ...me,
      pid: child.pid!,
      start_ticks: await readProcessStartTicks(child.pid!),
      host: hostname(),
    };
    await exited;
    const orphan = await new GenericContainer('roboguide/pair-driver:1')
      .withCommand(['sleep', '600'])
      .withNetworkMode('none')
      .withLabels({ ...RUN, [TESTKIT_LABEL]: 'pair-driver', [TESTKIT_OWNER_LABEL]: JSON.stringify(dead) })
      .start();
    const mine = await new PairDriverContainer().withHang().withLabels(RUN).start();
    // Someone else's container carrying only an owner label (any user of the engine can label one): not the kit's.
    const foreign = await new GenericContainer('roboguide/pair-driver:1')
      .withCommand(['sleep', '600'])
      .withNetworkMode('none')
      .withLabels({ ...RUN, [TESTKIT_OWNER_LABEL]: JSON.stringify(dead) })
      .start();
    try {
      const report = await sweepTestKitLeftovers();
      expect(report.containers).toContain(orphan.getId());
      expect(report.containers).not.toContain(mine.getId());
      expect(report.containers).not.toContain(foreign.getId());
      expect((await runtime().inspect(foreign.getId()))?.status).toBe('running');
      expect(await runtime().inspect(orphan.getId())).toBeNull();
      expect((await runtime().inspect(mine.getId()))?.status).toBe('running');
    } finally {
      await mine.stop();
      await sweep(RUN);
    }
  });
});

describe.skipIf(noDocker)('RoboguideServer', () => {
  it('`await using` stops the server at the end of the block: its sessions deleted, its folder gone', async () => {
    let kept: StartedRoboguideServer;
    let containerId: string;
    {
      await using server = await new RoboguideServer().withEnvironment({ API_TOKEN: 'tok-123456' }).start();
      kept = server;
      const { body: s } = await server.client.call<{ session_id: string; container_id: string }>(
        'POST',
        '/v1/sessions',
        {
          body: {
            image: 'roboguide/pair-driver:1',
            environment: { TOKEN: '${API_TOKEN}' },
            labels: SESSION_LABEL,
          },
        },
      );
      containerId = s.container_id;
      const { body: out } = await server.client.call<{ stdout: string }>(
        'POST',
        `/v1/sessions/${s.session_id}/exec`,
        {
          body: { command: 'echo "$TOKEN"' },
        },
      );
      expect(out.stdout).toBe('[REDACTED]\n');
      expect(await containersLabelled({ 'roboguide.batch': server.batchId })).toEqual([containerId]);
    }
    expect(kept.process.exitCode).toBe(0);
    expect(existsSync(kept.workDir)).toBe(false);
    expect(await runtime().inspect(containerId)).toBeNull();
    expect(await containersLabelled(SESSION_LABEL)).toEqual([]);
  });
});
