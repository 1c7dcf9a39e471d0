import { randomUUID } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runPair } from '../../src/app/pair/run-pair.js';
import {
  DRIVER_IMAGE,
  engineHasNvidia,
  engineIsPodman,
  expectNoContainersLeft,
  noDocker,
  pairRunDeps,
  runtime,
} from '../support/docker.js';
import { listFilesRecursively, scanForSecret } from '../support/files.js';

const rt = runtime();
let work: string;
const jobsUsed: string[] = [];

function deps(): ReturnType<typeof pairRunDeps> {
  return pairRunDeps(rt);
}

function spec(
  jobId: string,
  actions: string[],
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    job_id: jobId,
    argv: ['/opt/driver/run', ...actions],
    cwd: join(work, jobId, 'cwd'),
    outcome_path: join(work, jobId, 'out', 'outcome.json'),
    environment: {},
    ports: [],
    timeout_seconds: 120,
    image: DRIVER_IMAGE,
    ...extra,
  };
}

async function run(
  jobId: string,
  actions: string[],
  extra: Record<string, unknown> = {},
  env: Record<string, string> = {},
) {
  jobsUsed.push(jobId);
  return runPair(deps(), {
    specText: JSON.stringify(spec(jobId, actions, extra)),
    specSource: `${jobId}.json`,
    output: join(work, jobId, 'evidence'),
    bindAddress: '127.0.0.1',
    environment: env,
    codeVersion: 'test',
    cwd: work,
  });
}

/** Ports nothing listens on right now (the kernel picks them), so a test never collides with another. */
async function freePorts(count: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from(
      { length: count },
      () =>
        new Promise<Server>((resolve) => {
          const server = createServer();
          server.listen(0, '127.0.0.1', () => resolve(server));
        }),
    ),
  );
  const ports = servers.map((s) => (s.address() as { port: number }).port);
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  return ports;
}

function uniqueJob(name: string): string {
  return `it-${name}-${randomUUID().slice(0, 6)}`;
}

describe.skipIf(noDocker)('pair run against the real engine', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-pair-'));
  });
  afterEach(() => expectNoContainersLeft(jobsUsed));
  afterAll(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it('runs a normal pair: receipt, logs, verbatim outcome, container removed and verified absent', async () => {
    const job = uniqueJob('normal');
    const { result, receipt, output } = await run(job, ['numbered=3', 'arm=hold', 'outcome=completed']);
    expect(result.classification).toBe('completed');
    expect(result.reasons).toEqual([]);
    expect(result.container.exit_code).toBe(0);
    expect(result.cleanup).toMatchObject({ verified_absent: true, removed: true });
    expect(await rt.inspect(result.container.id!)).toBeNull();
    expect(receipt.container_id).toBe(result.container.id);
    const onDisk = JSON.parse(await readFile(join(output, 'receipt.json'), 'utf8'));
    expect(onDisk.container_id).toBe(result.container.id);
    expect(await readFile(join(output, 'stdout.log'), 'utf8')).toBe(
      ['line 1', 'line 2', 'line 3'].map((l) => l.padEnd(63) + '\n').join(''),
    );
    // Verdicts are kept verbatim: "unavailable" stays, "Mission Completed" is not rewritten.
    expect(result.outcome).toMatchObject({
      arms: [{ verdict: 'hold' }, { verdict: 'unavailable', note: 'Mission Completed' }],
    });
    const written = JSON.parse(await readFile(join(output, 'result.json'), 'utf8'));
    expect(written).toEqual(JSON.parse(JSON.stringify(result)));
    // The host slot it took is given back through reconciliation, with a proof on disk.
    expect(receipt.reservation_id).not.toBeNull();
    expect((await deps().registry.reservation(receipt.reservation_id!))?.state).toBe('released');
    expect(JSON.parse(await readFile(join(output, 'terminal-proof.json'), 'utf8')).reservation_id).toBe(
      receipt.reservation_id,
    );
  });

  it('a cwd under a file is refused before a slot is taken (the mount rules walk it), so no slot is held', async () => {
    const job = uniqueJob('nocwd');
    const aFile = join(work, `${job}.file`);
    await writeFile(aFile, 'not a directory');
    await expect(run(job, ['outcome=completed'], { cwd: join(aFile, 'cwd') })).rejects.toMatchObject({
      code: 'E_SPEC_INVALID',
      issues: [expect.objectContaining({ path: 'cwd' })],
    });
    expect((await deps().registry.held()).filter((r) => r.jobId === job)).toEqual([]);
  });

  it('refuses to start when the host is at its capacity limit, writing nothing', async () => {
    const job = uniqueJob('full');
    const registry = deps().registry;
    await registry.setLimits({ maxReservations: 1, gpuMib: null });
    const blocker = await registry.admit({
      batchId: 'other-batch',
      jobId: 'x',
      claimId: `blocker-${job}`,
      gpuMib: 0,
    });
    try {
      await expect(run(job, ['outcome=completed'])).rejects.toMatchObject({
        code: 'E_CAPACITY',
        message: expect.stringContaining('capacity limit'),
      });
      await expect(stat(join(work, job, 'evidence'))).rejects.toMatchObject({ code: 'ENOENT' });
    } finally {
      if (blocker.kind === 'admitted') await registry.release(blocker.reservationId, `blocker-${job}`);
      await registry.setLimits({ maxReservations: 100, gpuMib: null });
    }
  });

  it('bind-mounts working and outcome directories whose paths contain a colon', async () => {
    const job = uniqueJob('colon');
    const { result } = await run(job, ['outcome=completed'], {
      cwd: join(work, job, 'run:1', 'cwd'),
      outcome_path: join(work, job, 'run:1', 'out:a', 'outcome.json'),
    });
    expect(result.classification).toBe('completed');
    expect(JSON.parse(await readFile(join(work, job, 'run:1', 'out:a', 'outcome.json'), 'utf8')).job_id).toBe(
      job,
    );
  });

  it('classifies a missing outcome as an infrastructure failure and still removes the container', async () => {
    const job = uniqueJob('nooutcome');
    const { result } = await run(job, ['numbered=1']);
    expect(result.classification).toBe('infrastructure_failure');
    expect(result.reasons).toContain('outcome_missing');
    expect(await rt.inspect(result.container.id!)).toBeNull();
  });

  it('stops a driver that ignores SIGTERM after its stop budget, records the timeout, and removes it', async () => {
    const job = uniqueJob('timeout');
    const { result, output } = await run(job, ['numbered=1', 'ignore_term', 'hang'], {
      timeout_seconds: 2,
      stop_budget_seconds: 2,
    });
    expect(result.container.timed_out).toBe(true);
    expect(result.container.exit_code).toBe(137); // killed after the budget, not by its own exit
    expect(result.classification).toBe('infrastructure_failure');
    expect(result.reasons).toContain('timeout');
    // It was running until the stop: its output before the hang is kept.
    expect(await readFile(join(output, 'stdout.log'), 'utf8')).toBe(`${'line 1'.padEnd(63)}\n`);
    expect(await rt.inspect(result.container.id!)).toBeNull();
  });

  // Podman drops the request instead (gpu_request_dropped): test/integration/podman.int.test.ts.
  it.skipIf(engineHasNvidia || engineIsPodman)(
    'fails a GPU request cleanly on an engine without the NVIDIA runtime and leaves no container',
    async () => {
      const job = uniqueJob('gpu');
      const { result } = await run(job, ['outcome=completed'], { gpus: 'all' });
      expect(result.classification).toBe('infrastructure_failure');
      expect(result.reasons).toContain('nvidia_runtime_missing');
      expect(result.engine_error?.message).toMatch(/could not select device driver/);
      expect(result.container.id).not.toBeNull();
      expect(await rt.inspect(result.container.id!)).toBeNull();
    },
  );

  // The Podman set's service publishes in its own network namespace, not where this process listens: the Podman
  // version (a process in that namespace, refused at the attach) is in test/integration/podman.int.test.ts.
  describe.skipIf(engineIsPodman)('a port already taken', () => {
    let server: Server;
    let port: number;
    beforeAll(async () => {
      server = createServer();
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      port = (server.address() as { port: number }).port;
    });
    afterAll(async () => {
      await new Promise((resolve) => server.close(resolve));
    });

    it('fails cleanly with port_allocated and leaves no container', async () => {
      const job = uniqueJob('port');
      const { result } = await run(job, ['outcome=completed'], { ports: [port] });
      expect(result.classification).toBe('infrastructure_failure');
      expect(result.reasons).toContain('port_allocated');
      expect(result.engine_error?.message).toMatch(/address already in use|port is already allocated/);
      expect(await rt.inspect(result.container.id!)).toBeNull();
    });
  });

  it('streams 50 MB of output byte-exact with flat memory', async () => {
    const job = uniqueJob('heavy');
    const bytes = 50_000_000;
    let peakRss = 0;
    const baseline = process.memoryUsage().rss;
    const sampler = setInterval(() => {
      peakRss = Math.max(peakRss, process.memoryUsage().rss);
    }, 50);
    let output: string;
    let result;
    try {
      ({ result, output } = await run(job, [
        `stdout_bytes=${bytes}`,
        'stderr_bytes=1000',
        'outcome=completed',
      ]));
    } finally {
      clearInterval(sampler);
    }
    expect(result.logs.stdout).toEqual({ bytes, closed: true });
    expect(result.logs.stderr).toEqual({ bytes: 1000, closed: true });
    const file = await readFile(join(output, 'stdout.log'));
    expect(file.length).toBe(bytes);
    const line = Buffer.from('roboguide-log-line 0123456789abcdefghijklmnopqrstuvwxyz ABCDEFG\n');
    // 64-byte lines, then the remainder as 'x'.
    expect(line.length).toBe(64);
    const whole = Math.floor(bytes / 64);
    for (const i of [0, 1, 777, whole - 1]) expect(file.subarray(i * 64, (i + 1) * 64)).toEqual(line);
    expect(file.subarray(whole * 64).toString()).toBe('x'.repeat(bytes % 64));
    expect(peakRss - baseline).toBeLessThan(120 * 1024 * 1024);
  });

  it('passes a ${NAME} secret to the driver and never writes it anywhere', async () => {
    const job = uniqueJob('secret');
    const secret = `s3cr3t-${randomUUID()}`;
    const { result, output } = await run(
      job,
      ['echo_env=API_TOKEN', 'session=echo_env=API_TOKEN', 'outcome=completed'],
      { environment: { API_TOKEN: '${API_TOKEN}', MODEL: 'm-1' } },
      { API_TOKEN: secret },
    );
    expect(result.classification).toBe('completed');
    expect(result.sessions.files).toBe(1);
    const stdout = await readFile(join(output, 'stdout.log'), 'utf8');
    expect(stdout).toContain('raw: [REDACTED');
    const files = [...(await listFilesRecursively(output)), ...(await listFilesRecursively(join(work, job)))];
    expect(files.length).toBeGreaterThan(4);
    for (const f of files) expect(await scanForSecret(f, secret), f).toEqual([]);
  });

  it("injects a job's six ports as the B1 launcher variables", async () => {
    const job = uniqueJob('b1');
    const ports = await freePorts(6);
    const variables = [
      'ROBOGUIDE_B1_CONTROLLER_GRPC_PORT',
      'ROBOGUIDE_B1_CONTROLLER_PORT',
      'ROBOGUIDE_B1_ARTIFACT_PORT',
      'ROBOGUIDE_B1_HABITAT_PORT',
      'ROBOGUIDE_B1_HABITAT_PORT_B',
      'ROBOGUIDE_B1_MISSION_PORT',
    ];
    const { result, output } = await run(
      job,
      [...variables.map((v) => `print_env=${v}`), 'outcome=completed'],
      { ports, b1_ports: true },
    );
    expect(result.classification).toBe('completed');
    const lines = (await readFile(join(output, 'stdout.log'), 'utf8')).trim().split('\n');
    expect(lines).toEqual(variables.map((v, i) => `${v}=${ports[i]}`));
  });

  it('refuses a spec with an unset referenced variable, writing nothing', async () => {
    const job = uniqueJob('unset');
    await expect(
      run(job, ['outcome=completed'], { environment: { API_TOKEN: '${NOT_SET_ANYWHERE}' } }),
    ).rejects.toMatchObject({
      exitCode: 2,
    });
    await expect(stat(join(work, job, 'evidence'))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('keeps an existing outcome file and refuses to run over it', async () => {
    const job = uniqueJob('stale');
    const first = await run(job, ['outcome=completed']);
    expect(first.result.classification).toBe('completed');
    const again = runPair(deps(), {
      specText: JSON.stringify(spec(job, ['outcome=fatal'])),
      specSource: 'again.json',
      output: join(work, job, 'evidence-2'),
      bindAddress: '127.0.0.1',
      environment: {},
      codeVersion: 'test',
      cwd: work,
    });
    await expect(again).rejects.toMatchObject({ exitCode: 2 });
    expect(await readdir(join(work, job))).not.toContain('evidence-2');
  });
});
