import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { systemClock } from '../../../../src/adapters/system-clock.js';
import { NodeFileSystem } from '../../../../src/adapters/fs/node-file-system.js';
import type { SupervisorLoop } from '../../../../src/app/batch/supervisor-loop.js';
import { admissionNodesOf, type Supervision } from '../../../../src/app/batch/supervisor-ports.js';
import { listenForStops, StopLatch } from '../../../../src/app/batch/supervisor-signals.js';
import { NODES_DOWN_FILE } from '../../../../src/core/evidence-names.js';
import { EvidenceStore } from '../../../../src/app/evidence/evidence-store.js';
import type { SupervisorEvent } from '../../../../src/core/supervisor-machine.js';
import type { BatchRecord } from '../../../../src/app/batch/layout.js';
import type { SupervisorDeps } from '../../../../src/app/batch/supervisor-deps.js';
import type { NodeInventory } from '../../../../src/app/ports/executor-inventory.js';
import { executeDeps, fakeOf } from '../../../support/fakes.js';

/** A loop that only records the events fed to it. */
function recordingLoop(): { loop: SupervisorLoop; events: SupervisorEvent[] } {
  const events: SupervisorEvent[] = [];
  const loop = fakeOf<SupervisorLoop>('SupervisorLoop', {
    feed: (e) => (events.push(e), Promise.resolve()),
  });
  return { loop, events };
}

let dir: string;
let store: EvidenceStore;
const offs: (() => void)[] = [];

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-signals-'));
  store = new EvidenceStore(new NodeFileSystem(), dir);
});
afterEach(async () => {
  for (const off of offs.splice(0)) off();
  await rm(dir, { recursive: true, force: true });
});

/** `process.emit` calls the listeners without sending a signal: nothing reaches the test runner. */
describe('the stop protocol', () => {
  it('SIGUSR2 reads the stop file and feeds its request', async () => {
    const { loop, events } = recordingLoop();
    const latch = new StopLatch();
    offs.push(listenForStops({ store, handleSignals: false, clock: systemClock }, loop, latch));
    await store.writeJsonAtomic('stop-request.json', { terminate: true, requested_at: 't' });
    process.emit('SIGUSR2', 'SIGUSR2');
    await vi.waitFor(() => expect(events).toEqual([{ type: 'stop_requested', terminate: true }]));
  });

  it('a SIGUSR2 latched before the handler is in place is read once it is', async () => {
    const { loop, events } = recordingLoop();
    const latch = new StopLatch();
    await store.writeJsonAtomic('stop-request.json', { terminate: false, requested_at: 't' });
    process.emit('SIGUSR2', 'SIGUSR2');
    expect(latch.latched).toBe(true);
    offs.push(listenForStops({ store, handleSignals: false, clock: systemClock }, loop, latch));
    await vi.waitFor(() => expect(events).toEqual([{ type: 'stop_requested', terminate: false }]));
  });

  it('SIGTERM and SIGINT become signal events only with handleSignals; removing takes every listener away', () => {
    const before = {
      usr2: process.listenerCount('SIGUSR2'),
      term: process.listenerCount('SIGTERM'),
      int: process.listenerCount('SIGINT'),
    };
    const { loop, events } = recordingLoop();
    const off = listenForStops({ store, handleSignals: true, clock: systemClock }, loop, new StopLatch());
    process.emit('SIGTERM', 'SIGTERM');
    process.emit('SIGINT', 'SIGINT');
    expect(events).toEqual([{ type: 'signal' }, { type: 'signal' }]);
    off();
    expect({
      usr2: process.listenerCount('SIGUSR2'),
      term: process.listenerCount('SIGTERM'),
      int: process.listenerCount('SIGINT'),
    }).toEqual(before);
    const quiet = recordingLoop();
    offs.push(
      listenForStops({ store, handleSignals: false, clock: systemClock }, quiet.loop, new StopLatch()),
    );
    expect(process.listenerCount('SIGTERM')).toBe(before.term);
  });
});

describe('swarm admission nodes', () => {
  function supervision(
    ready: () => Promise<readonly string[]>,
    executor: 'swarm' | 'local' = 'swarm',
  ): Supervision {
    const nodes: NodeInventory = { readyNodes: ready };
    return fakeOf<Supervision>('Supervision', {
      deps: fakeOf<SupervisorDeps>('SupervisorDeps', { store, execute: executeDeps({ nodes }) }),
      batch: fakeOf<BatchRecord>('BatchRecord', {
        batch_id: 'b',
        executor:
          executor === 'swarm'
            ? { kind: 'swarm', manager: 'unix:///m.sock', node_engines: {} }
            : { kind: 'local' },
      }),
    });
  }

  it('takes the ready nodes in turn, so that pairs spread over them', async () => {
    const nodes = admissionNodesOf(supervision(() => Promise.resolve(['n1', 'n2', 'n3'])));
    expect(nodes).toBeDefined();
    const turns = [];
    for (let i = 0; i < 4; i++) turns.push(await nodes?.([]));
    expect(turns).toEqual([
      ['n1', 'n2', 'n3'],
      ['n2', 'n3', 'n1'],
      ['n3', 'n1', 'n2'],
      ['n1', 'n2', 'n3'],
    ]);
  });

  it('leaves out the nodes the operator declared down; none ready (or the manager unreachable): none', async () => {
    await store.writeJsonAtomic(NODES_DOWN_FILE, { nodes: [{ node: 'n2' }] });
    const nodes = admissionNodesOf(supervision(() => Promise.resolve(['n1', 'n2'])));
    const first = await nodes?.([]);
    expect(first).not.toContain('n2');
    expect(
      await admissionNodesOf(supervision(() => Promise.reject(new Error('manager away'))))?.([]),
    ).toEqual([]);
  });

  it('a local batch has none: admission uses the registry own node', () => {
    expect(admissionNodesOf(supervision(() => Promise.resolve(['n1']), 'local'))).toBeUndefined();
  });
});
