import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { DockerContainerRuntime } from '../../../../src/adapters/docker/docker-container-runtime.js';
import { LogFeed } from '../../../../src/adapters/swarm/log-feed.js';
import { SwarmContainerRuntime } from '../../../../src/adapters/swarm/swarm-container-runtime.js';
import { gpuCountOf } from '../../../../src/adapters/swarm/swarm-service-spec.js';
import type { LazyContainerRuntime } from '../../../../src/adapters/docker/lazy-container-runtime.js';
import { LazyExecutorRuntime } from '../../../../src/adapters/docker/lazy-container-runtime.js';
import { createExecutor, runtimeForOutput } from '../../../../src/composition-root.js';
import { swarmSlots } from '../../../../src/app/batch/swarm-checks.js';
import { classify } from '../../../../src/core/classify.js';
import { decideDispatch, workersAllowed } from '../../../../src/core/dispatch-policy.js';
import { InvalidInputError } from '../../../../src/core/errors.js';
import { executorFromFlags, executorOfRecord, parseEngineEndpoint } from '../../../../src/core/executor.js';
import { Placement as PlacementSchemaForTest } from '../../../../src/core/manifest/fields.js';
import { until } from '../../../support/until.js';

function issuesOf(fn: () => unknown): string[] {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(InvalidInputError);
    expect((err as InvalidInputError).exitCode).toBe(2);
    return (err as InvalidInputError).issues.map((i) => `${i.path}: ${i.rule}`);
  }
  throw new Error('expected a refusal');
}

describe('executor flags (--executor, --manager, --node-engine)', () => {
  it('defaults to local; swarm needs a manager and node engines', () => {
    expect(executorFromFlags({})).toEqual({ kind: 'local' });
    expect(executorFromFlags({ executor: 'local' })).toEqual({ kind: 'local' });
    expect(
      executorFromFlags({
        executor: 'swarm',
        manager: 'unix:///run/m.sock',
        'node-engine': [
          'gpu-1=unix:///run/n1.sock',
          'gpu-2=tcp://10.0.0.2:2376?ca=/c/ca.pem&cert=/c/cert.pem&key=/c/key.pem',
          'n3=ssh://ops@gpu-3',
        ],
      }),
    ).toEqual({
      kind: 'swarm',
      manager: 'unix:///run/m.sock',
      node_engines: {
        'gpu-1': 'unix:///run/n1.sock',
        'gpu-2': 'tcp://10.0.0.2:2376?ca=/c/ca.pem&cert=/c/cert.pem&key=/c/key.pem',
        n3: 'ssh://ops@gpu-3',
      },
    });
  });

  it('names the flag and the rule for every bad value', () => {
    expect(issuesOf(() => executorFromFlags({ executor: 'k8s' }))).toEqual([
      '--executor: must be local or swarm (got "k8s")',
    ]);
    expect(issuesOf(() => executorFromFlags({ manager: 'unix:///x' }))).toEqual([
      '--manager: only with --executor swarm',
    ]);
    expect(issuesOf(() => executorFromFlags({ 'node-engine': ['a=unix:///x'] }))).toEqual([
      '--node-engine: only with --executor swarm',
    ]);
    const swarm = issuesOf(() => executorFromFlags({ executor: 'swarm' }));
    expect(swarm[0]).toMatch(/^--manager: required with --executor swarm/);
    expect(swarm[1]).toMatch(/^--node-engine: at least one NODE=URL/);
    expect(
      issuesOf(() =>
        executorFromFlags({
          executor: 'swarm',
          manager: 'http://m:1',
          'node-engine': ['x', 'a=unix:///s', 'a=unix:///t', '-b=unix:///s', 'c=tcp://h:1?ca=/a'],
        }),
      ),
    ).toEqual([
      '--manager: scheme http is not one of unix, tcp, ssh',
      "--node-engine[0]: must be NODE=URL (NODE: the node's hostname or id)",
      '--node-engine[2]: node a is given twice',
      '--node-engine[3]: NODE must be 1-128 of [A-Za-z0-9._-], starting with a letter or digit',
      '--node-engine[4]: TLS needs all three of ca=, cert= and key= (absolute file paths)',
    ]);
  });

  it('parses endpoints and never accepts a password in one', () => {
    expect(parseEngineEndpoint('unix:///var/run/docker.sock')).toEqual({
      kind: 'unix',
      socketPath: '/var/run/docker.sock',
    });
    expect(parseEngineEndpoint('tcp://10.1.2.3:2375')).toEqual({
      kind: 'tcp',
      host: '10.1.2.3',
      port: 2375,
      tls: null,
    });
    expect(parseEngineEndpoint('ssh://ops@gpu-3:2222')).toEqual({
      kind: 'ssh',
      host: 'gpu-3',
      port: 2222,
      username: 'ops',
    });
    expect(parseEngineEndpoint('ssh://ops:hunter22@gpu-3')).toEqual({
      problem: 'ssh:// must not carry a password (use an SSH agent or key)',
    });
    expect(parseEngineEndpoint('tcp://u:p@h:1')).toMatchObject({
      problem: expect.stringMatching(/no user or password/) as string,
    });
    expect(parseEngineEndpoint('unix://relative.sock')).toMatchObject({
      problem: expect.stringMatching(/absolute socket path/) as string,
    });
    expect(parseEngineEndpoint('tcp://h')).toMatchObject({
      problem: expect.stringMatching(/host and a port/) as string,
    });
    expect(parseEngineEndpoint('not a url')).toMatchObject({
      problem: expect.stringMatching(/must be a URL/) as string,
    });
  });

  it('reads the executor back from batch.json (absent: local) and refuses a damaged one', () => {
    expect(executorOfRecord(undefined)).toEqual({ kind: 'local' });
    const swarm = { kind: 'swarm', manager: 'unix:///m', node_engines: { n1: 'unix:///n1' } };
    expect(executorOfRecord(swarm)).toEqual(swarm);
    expect(() => executorOfRecord({ kind: 'swarm' })).toThrow(InvalidInputError);
  });
});

describe('swarm capacity', () => {
  it('slots: GPUs per node divided by GPUs per pair, summed; one per node without GPUs; at least 1', () => {
    const nodes = [{ gpus: 2 }, { gpus: 3 }];
    expect(swarmSlots(nodes, 1)).toBe(5);
    expect(swarmSlots(nodes, 2)).toBe(2);
    expect(swarmSlots(nodes, 4)).toBe(1);
    expect(swarmSlots(nodes, 0)).toBe(2);
    expect(swarmSlots([], 1)).toBe(1);
  });

  it('dispatch: the first pair alone, then as many workers as the swarm has slots (no one-GPU sharing rule)', () => {
    const capacity = { maxWorkers: 1 as const, executorSlots: 4 };
    expect(workersAllowed(capacity, [], 0)).toBe(1);
    expect(workersAllowed(capacity, [], 1)).toBe(4);
    const base = {
      jobIds: ['a', 'b', 'c', 'd', 'e', 'f'],
      gpuPeaksMib: [],
      capacity,
      paused: false,
      stopping: false,
      registryRefused: false,
    };
    expect(
      decideDispatch({ ...base, claimed: new Set(['a', 'b', 'c']), running: 3, finishedCount: 1 }),
    ).toMatchObject({ kind: 'dispatch', jobId: 'd', workersAllowed: 4 });
    expect(
      decideDispatch({ ...base, claimed: new Set(['a', 'b', 'c', 'd', 'e']), running: 4, finishedCount: 1 }),
    ).toMatchObject({ kind: 'wait', reason: 'at_capacity' });
  });

  it('GPUs become generic resources: a count, or the number of listed ids; "all" cannot be placed', () => {
    const req = (r: object) => ({
      deviceRequests: [{ Driver: 'nvidia' as const, Capabilities: [['gpu']], ...r }],
    });
    expect(gpuCountOf({ deviceRequests: [] })).toBe(0);
    expect(gpuCountOf(req({ Count: 2 }))).toBe(2);
    expect(gpuCountOf(req({ DeviceIDs: ['0', '1', '2'] }))).toBe(3);
    expect(() => gpuCountOf(req({ Count: -1 }))).toThrow(/cannot be placed on a swarm/);
  });

  it('placement constraints: validated swarm syntax only', () => {
    expect(
      PlacementSchemaForTest.safeParse([
        'node.hostname==gpu-3',
        'node.labels.zone != b',
        'engine.labels.cuda==12.4',
      ]).success,
    ).toBe(true);
    expect(PlacementSchemaForTest.safeParse(['node.hostname=gpu-3']).success).toBe(false);
    expect(PlacementSchemaForTest.safeParse(['hostname==x']).success).toBe(false);
    expect(PlacementSchemaForTest.safeParse(['node.hostname==$(reboot)']).success).toBe(false);
  });

  it('a lost node classifies as infrastructure_failure/node_lost', () => {
    expect(
      classify({
        jobId: 'j',
        outcome: { kind: 'missing' },
        timedOut: false,
        terminated: false,
        engineFault: null,
        engineLoss: 'node_lost',
        harnessFaults: [],
        allowedHttpStatuses: [],
      }),
    ).toEqual({ classification: 'infrastructure_failure', reasons: ['node_lost', 'outcome_missing'] });
  });
});

/** Docker's multiplexed log frames. */
function frames(parts: readonly [1 | 2, string][]): Buffer {
  return Buffer.concat(
    parts.map(([stream, text]) => {
      const payload = Buffer.from(text);
      const header = Buffer.alloc(8);
      header[0] = stream;
      header.writeUInt32BE(payload.length, 4);
      return Buffer.concat([header, payload]);
    }),
  );
}

async function text(stream: Readable): Promise<string> {
  let out = '';
  for await (const chunk of stream) out += (chunk as Buffer).toString();
  return out;
}

/** Reads a stream as it comes: `seen` is what arrived so far, `all` the whole text once it ends. */
function reading(stream: Readable): { seen: () => string; all: Promise<string> } {
  let out = '';
  const all = (async () => {
    for await (const chunk of stream) out += (chunk as Buffer).toString();
    return out;
  })();
  return { seen: () => out, all };
}

describe('service log feed (follow never ends; completion re-reads and skips what was delivered)', () => {
  it('each byte once: the followed prefix, then the rest of a complete re-read; both streams end', async () => {
    const feed = new LogFeed();
    const follow = new PassThrough();
    feed.attachSource(follow);
    const out = reading(feed.stdout);
    const err = reading(feed.stderr);
    follow.write(
      frames([
        [1, 'line 1\n'],
        [2, 'e1\n'],
        [1, 'line 2\n'],
      ]),
    );
    await until(
      () => (out.seen() === 'line 1\nline 2\n' && err.seen() === 'e1\n' ? true : undefined),
      'the followed prefix delivered',
    );
    await feed.complete(
      () =>
        Promise.resolve(
          Readable.from([
            frames([
              [1, 'line 1\nline 2\n'],
              [2, 'e1\ne2\n'],
              [1, 'line 3\n'],
            ]),
          ]),
        ),
      1_000,
    );
    expect(await out.all).toBe('line 1\nline 2\nline 3\n');
    expect(await err.all).toBe('e1\ne2\n');
    expect(follow.destroyed).toBe(true);
  });

  it('a re-read that fails ends the streams in error (never reported as a complete log)', async () => {
    const feed = new LogFeed();
    feed.attachSource(new PassThrough());
    const out = text(feed.stdout);
    void text(feed.stderr).catch(() => undefined);
    await feed.complete(() => Promise.reject(new Error('manager gone')), 1_000);
    await expect(out).rejects.toThrow('manager gone');
  });

  it('endNow (node lost): ends with what was delivered', async () => {
    const feed = new LogFeed();
    const follow = new PassThrough();
    feed.attachSource(follow);
    const out = reading(feed.stdout);
    follow.write(frames([[1, 'before the loss\n']]));
    await until(() => (out.seen() === 'before the loss\n' ? true : undefined), 'the line delivered');
    feed.endNow();
    expect(await out.all).toBe('before the loss\n');
  });
});

describe('the executor factory (createExecutor)', () => {
  it('the local engine has no node or placement inventory; a swarm has both, beside its runtime', async () => {
    const local = createExecutor({ kind: 'local' });
    expect(local.nodes).toBeUndefined();
    expect(local.placements).toBeUndefined();
    const swarm = createExecutor({
      kind: 'swarm',
      manager: 'unix:///nonexistent/rg-manager.sock',
      node_engines: { n1: 'unix:///nonexistent/rg-n1.sock' },
    });
    expect(await (swarm.runtime as LazyExecutorRuntime).runtime()).toBeInstanceOf(SwarmContainerRuntime);
    // Both ask the swarm's manager: one that does not answer is an engine error, not an empty answer.
    await expect(swarm.nodes?.readyNodes([])).rejects.toThrow(/unreachable while trying to list swarm nodes/);
    await expect(swarm.placements?.placementOf('svc')).resolves.toBeNull();
  });
});

describe('the runtime that owns existing evidence (reconcile, pair recover, status)', () => {
  it('a swarm batch gets its recorded executor; a local pair run the local engine; a swarm pair run is refused', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'rg-owner-'));
    try {
      await writeFile(
        join(dir, 'batch.json'),
        JSON.stringify({
          executor: { kind: 'swarm', manager: 'unix:///m.sock', node_engines: { n1: 'unix:///n1.sock' } },
        }),
      );
      const swarm = await runtimeForOutput(dir);
      expect(swarm).toBeInstanceOf(LazyExecutorRuntime);
      expect(await (swarm as LazyExecutorRuntime).runtime()).toBeInstanceOf(SwarmContainerRuntime);
      await rm(join(dir, 'batch.json'));
      await writeFile(join(dir, 'receipt.json'), JSON.stringify({ container_id: 'a'.repeat(64) }));
      const local = await runtimeForOutput(dir);
      expect(local).not.toBeInstanceOf(LazyExecutorRuntime);
      expect(await (local as LazyContainerRuntime).runtime()).toBeInstanceOf(DockerContainerRuntime);
      await writeFile(
        join(dir, 'receipt.json'),
        JSON.stringify({ container_id: 'rxbue33dzpz6k8grl6r76820q' }),
      );
      await expect(runtimeForOutput(dir)).rejects.toThrow(
        /ran on a swarm \(service rxbue33dzpz6k8grl6r76820q\)/,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
