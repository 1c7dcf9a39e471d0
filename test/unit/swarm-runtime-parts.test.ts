import { createServer, type Server } from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Docker from 'dockerode';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  SwarmContainerRuntime,
  type SwarmRuntimeParts,
} from '../../src/adapters/swarm/swarm-container-runtime.js';
import { waitForTask, type SwarmWaitParts } from '../../src/adapters/swarm/swarm-wait.js';
import type { TaskView } from '../../src/adapters/swarm/swarm-tasks.js';
import { silentLogger, type Logger } from '../../src/app/ports/logger.js';

/**
 * The swarm runtime's parts, each replaced by a hand-written fake typed as the part's methods; the manager is a real
 * dockerode client talking to a small HTTP stand-in on a unix socket that answers the service removal.
 */
let dir: string;
let server: Server;
let requests: string[];
let serviceStatus: number;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-swarm-parts-'));
  requests = [];
  serviceStatus = 200;
  server = createServer((req, res) => {
    requests.push(`${req.method} ${req.url?.split('?')[0]}`);
    res.writeHead(req.method === 'DELETE' ? serviceStatus : 404, { 'content-type': 'application/json' });
    res.end(req.method === 'DELETE' && serviceStatus === 200 ? '' : '{"message":"no such service"}');
  });
  await new Promise<void>((resolve) => server.listen(join(dir, 'manager.sock'), resolve));
});

afterEach(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await rm(dir, { recursive: true, force: true });
});

function recordingLogger(): {
  logger: Logger;
  warnings: { fields: Record<string, unknown>; message: string }[];
} {
  const warnings: { fields: Record<string, unknown>; message: string }[] = [];
  return {
    logger: { ...silentLogger, warn: (fields, message) => warnings.push({ fields, message }) },
    warnings,
  };
}

function parts(overrides: Partial<SwarmRuntimeParts>, calls: string[]): SwarmRuntimeParts {
  return {
    manager: new Docker({ socketPath: join(dir, 'manager.sock') }),
    nodes: {
      configured: () => [],
      engineNamed: () => Promise.reject(new Error('no node engine in this test')),
      loss: () => Promise.resolve(null),
      nodeName: (id) => Promise.resolve(id),
    },
    tasks: {
      task: () => Promise.resolve(undefined),
      refresh: (id) => {
        calls.push(`refresh ${id}`);
        return Promise.resolve();
      },
      created: () => undefined,
      fromService: () => Promise.resolve(undefined),
    },
    logs: {
      open: () => Promise.reject(new Error('not in this test')),
      complete: (id) => {
        calls.push(`complete ${id}`);
        return Promise.resolve();
      },
      completeSoon: () => undefined,
      endNow: (id) => calls.push(`endNow ${id}`),
    },
    containers: {
      removeTaskContainer: (id) => {
        calls.push(`removeTaskContainer ${id}`);
        return Promise.reject(Object.assign(new Error('node engine unreachable'), { code: 'ECONNREFUSED' }));
      },
      removeVolumes: (id) => {
        calls.push(`removeVolumes ${id}`);
        return Promise.reject(new Error('volume is in use'));
      },
      inspectRemoved: () => Promise.resolve(null),
      archive: () => Promise.resolve(null),
      collect: () => Promise.resolve(),
    },
    logger: silentLogger,
    pollMs: 1,
    nodeLossGraceMs: 0,
    ...overrides,
  } satisfies SwarmRuntimeParts;
}

describe('swarm remove: the cleanup on the node is best effort, and never silent', () => {
  it('a task container and volumes that cannot be removed on the node: the service is removed, both failures logged', async () => {
    const calls: string[] = [];
    const { logger, warnings } = recordingLogger();
    const runtime = new SwarmContainerRuntime(parts({ logger }, calls));
    expect(await runtime.remove('svc1')).toBe('removed');
    expect(requests).toEqual(['DELETE /services/svc1']);
    expect(calls).toEqual([
      'refresh svc1',
      'complete svc1',
      'removeTaskContainer svc1',
      'removeVolumes svc1',
    ]);
    expect(warnings.map((w) => [w.fields['service'], w.message])).toEqual([
      ['svc1', "the pair's container not removed on its node yet (the verified removal looks again)"],
      ['svc1', "the pair's volumes not removed on its node yet (the verified removal looks again)"],
    ]);
    expect(warnings[0]?.fields['err']).toBeDefined();
  });

  it('a service the manager no longer has is absent; its node is still cleaned up', async () => {
    serviceStatus = 404;
    const calls: string[] = [];
    const runtime = new SwarmContainerRuntime(parts({}, calls));
    expect(await runtime.remove('svc2')).toBe('absent');
    expect(calls).toContain('removeTaskContainer svc2');
    expect(calls).toContain('removeVolumes svc2');
  });
});

describe('swarm wait (swarm-wait.ts)', () => {
  const task = (state: string, extra: Partial<TaskView> = {}): TaskView => ({
    id: 't1',
    nodeId: 'node-id-1',
    state,
    containerId: 'c1',
    exitCode: null,
    err: null,
    timestamp: null,
    ...extra,
  });

  function waitParts(tasks: TaskView[], loss: 'down' | 'silent' | null, calls: string[]): SwarmWaitParts {
    return {
      tasks: { task: () => Promise.resolve(tasks.length > 1 ? tasks.shift() : tasks[0]) },
      nodes: { loss: () => Promise.resolve(loss), nodeName: () => Promise.resolve('gpu-1') },
      logs: {
        complete: (id) => {
          calls.push(`complete ${id}`);
          return Promise.resolve();
        },
        endNow: (id) => calls.push(`endNow ${id}`),
      },
      pollMs: 1,
      nodeLossGraceMs: 0,
    };
  }

  it('a task that exits: its exit code, after its log was completed', async () => {
    const calls: string[] = [];
    const parts = waitParts([task('running'), task('complete', { exitCode: 3 })], null, calls);
    expect(await waitForTask(parts, 's1', { deadlineMs: Date.now() + 5_000 })).toEqual({
      kind: 'exited',
      exitCode: 3,
    });
    expect(calls).toEqual(['complete s1']);
  });

  it('a node the swarm marks down while the pair runs: node_lost by hostname, the log ended with what came', async () => {
    const calls: string[] = [];
    const result = await waitForTask(waitParts([task('running')], 'down', calls), 's1', {
      deadlineMs: Date.now() + 5_000,
    });
    expect(result).toMatchObject({ kind: 'node_lost', node: 'gpu-1' });
    expect(calls).toEqual(['endNow s1']);
  });

  it('a task the node could not start: an engine fault naming the missing image, not an exit', async () => {
    const parts = waitParts([task('rejected', { containerId: null, err: 'No such image: x:1' })], null, []);
    await expect(waitForTask(parts, 's1', { deadlineMs: Date.now() + 5_000 })).rejects.toMatchObject({
      fault: 'image_missing',
    });
  });
});
