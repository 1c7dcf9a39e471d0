/**
 * The registry worker (a worker thread of `serve`): owns the SQLite connection (node:sqlite is synchronous: an
 * admission writes and fsyncs, and a writer waits up to the registry deadline for another process's lock) so none of
 * that runs on serve's event loop. One call at a time, in the order they arrive (worker-registry.ts is its caller).
 */
import { parentPort, workerData } from 'node:worker_threads';
import type { CapacityRegistry } from '../../app/ports/capacity-registry.js';
import type { SqliteRegistryLocation } from './default-path.js';
import { openRegistryAt } from './open-registry.js';
import { toWire, type WireAnswer, type WireCall } from './registry-wire.js';

const port = parentPort;
if (port === null) throw new Error('registry-worker.js runs as a worker thread only');

const answer = (message: WireAnswer): void => {
  try {
    port.postMessage(message);
  } catch (err) {
    // A value that does not survive the structured clone: the caller gets an error, never silence.
    port.postMessage({ id: message.id, ok: false, error: toWire(err) } satisfies WireAnswer);
  }
};

let registry: CapacityRegistry;
try {
  registry = await openRegistryAt(workerData as SqliteRegistryLocation);
  answer({ id: 0, ok: true, value: { localNode: registry.localNode } });
} catch (err) {
  answer({ id: 0, ok: false, error: toWire(err) });
  port.close();
  process.exit(0);
}

port.on('message', (call: WireCall) => {
  const method = (registry as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>)[
    call.method
  ];
  if (typeof method !== 'function') {
    answer({
      id: call.id,
      ok: false,
      error: { name: 'Error', message: `no registry method ${call.method}` },
    });
    return;
  }
  method.apply(registry, [...call.args]).then(
    (value) => {
      answer({ id: call.id, ok: true, value });
      if (call.method === 'close') port.close();
    },
    (err: unknown) => answer({ id: call.id, ok: false, error: toWire(err) }),
  );
});
