/**
 * A SQLite capacity registry whose connection lives in a worker thread (registry-worker.ts), for `serve` (issue 39):
 * node:sqlite is synchronous, so in serve's own thread every admission and release wrote and fsynced on the event
 * loop (`synchronous = FULL`), and a call meeting another process's write lock held the loop for up to the registry
 * deadline. Here the loop only posts a message and awaits the answer; the worker runs the same SqliteCapacityRegistry
 * (the same transactions, the same durability, the same deadline), one call at a time in arrival order, and its
 * errors come back as the same classes and codes (registry-wire.ts).
 *
 * `acquireLease` is refused: its liveness test is a function of the caller's, which cannot cross the thread (serve
 * never takes a supervisor lease; batches open the registry in their own thread). If the worker dies, every pending
 * and later call fails with E_REGISTRY_UNAVAILABLE (serve answers 503).
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type {
  AdmitRequest,
  AdmitResult,
  BoardAnnotation,
  BoardFilter,
  BoardRow,
  CapacityRegistry,
  HostLimits,
  LeaseResult,
  NodeLimits,
  PortHolder,
  RegistrySchemaVersion,
  ReleaseResult,
  Reservation,
  ReservationFilter,
  SupervisorLease,
  TerminalCommit,
  TerminalCommitResult,
} from '../../app/ports/capacity-registry.js';
import { RoboguideError } from '../../core/errors.js';
import type { SqliteRegistryLocation } from './default-path.js';
import { fromWire, type WireAnswer, type WireCall } from './registry-wire.js';

/**
 * The worker's compiled file. Every module of ours that can hold this code sits two folders below dist/ (dist/adapters/
 * registry/, and the bundle's dist/bundle/commands/ and dist/bundle/chunks/), and tsc's dist/ keeps every module.
 * Null when this module runs from its TypeScript source (a test runner's in-process server): there is no compiled
 * worker beside it, and the caller opens the registry in its own thread.
 */
export function registryWorkerFile(): string | null {
  const file = fileURLToPath(new URL('../../adapters/registry/registry-worker.js', import.meta.url));
  if (existsSync(file)) return file;
  if (import.meta.url.endsWith('.ts')) return null;
  throw new RoboguideError('E_INTERNAL', `the registry worker is missing at ${file} (run npm run build)`);
}

interface Pending {
  resolve(value: unknown): void;
  reject(err: Error): void;
}

export class WorkerCapacityRegistry implements CapacityRegistry {
  readonly #worker: Worker;
  readonly #pending = new Map<number, Pending>();
  #nextId = 1;
  #stopped: Error | null = null;
  readonly #exited: Promise<void>;
  readonly localNode: string;

  private constructor(worker: Worker, localNode: string) {
    this.#worker = worker;
    this.localNode = localNode;
    worker.on('message', (answer: WireAnswer) => this.#settle(answer));
    worker.on('error', (err: Error) => this.#stop(err));
    this.#exited = new Promise((resolve) =>
      worker.once('exit', (code) => {
        this.#stop(new Error(`the registry worker exited (code ${code})`));
        resolve();
      }),
    );
    // Like the connection it replaces, an idle worker never keeps the process alive; a call in flight does.
    worker.unref();
  }

  /** Opens the registry in a new worker (the same checks, creation and migration as in the caller's thread). */
  static async open(location: SqliteRegistryLocation, workerFile: string): Promise<WorkerCapacityRegistry> {
    const worker = new Worker(workerFile, { workerData: location });
    let onMessage: (answer: WireAnswer) => void = () => undefined;
    let onError: (err: Error) => void = () => undefined;
    let onExit: (code: number) => void = () => undefined;
    const first = await new Promise<WireAnswer>((resolve, reject) => {
      onMessage = resolve;
      onError = reject;
      onExit = (code) => reject(new Error(`the registry worker exited (code ${code}) before it opened`));
      worker.once('message', onMessage).once('error', onError).once('exit', onExit);
    }).finally(() => worker.off('message', onMessage).off('error', onError).off('exit', onExit));
    if (!first.ok) {
      await worker.terminate();
      throw fromWire(first.error);
    }
    return new WorkerCapacityRegistry(worker, (first.value as { localNode: string }).localNode);
  }

  #settle(answer: WireAnswer): void {
    const pending = this.#pending.get(answer.id);
    if (pending === undefined) return;
    this.#pending.delete(answer.id);
    if (this.#pending.size === 0) this.#worker.unref();
    if (answer.ok) pending.resolve(answer.value);
    else pending.reject(fromWire(answer.error));
  }

  #stop(cause: Error): void {
    this.#stopped ??= new RoboguideError('E_REGISTRY_UNAVAILABLE', 'the capacity registry worker stopped', {
      cause,
    });
    for (const pending of this.#pending.values()) pending.reject(this.#stopped);
    this.#pending.clear();
  }

  #call<T>(method: keyof CapacityRegistry, args: readonly unknown[]): Promise<T> {
    if (this.#stopped !== null) return Promise.reject(this.#stopped);
    const id = this.#nextId++;
    return new Promise<T>((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      if (this.#pending.size === 1) this.#worker.ref();
      try {
        this.#worker.postMessage({ id, method, args } satisfies WireCall);
      } catch (err) {
        this.#pending.delete(id);
        if (this.#pending.size === 0) this.#worker.unref();
        reject(err instanceof Error ? err : new Error(String(err)));
      }
    });
  }

  acquireLease(
    batchId: string,
    _lease: SupervisorLease,
    _isAlive: (holder: SupervisorLease) => boolean,
  ): Promise<LeaseResult> {
    return Promise.reject(
      new RoboguideError(
        'E_INTERNAL',
        `a supervisor lease (batch ${batchId}) is taken on a registry opened in the caller's thread, not through the registry worker`,
      ),
    );
  }
  releaseLease(batchId: string, pid: number): Promise<void> {
    return this.#call('releaseLease', [batchId, pid]);
  }
  supervisorLease(batchId: string): Promise<SupervisorLease | null> {
    return this.#call('supervisorLease', [batchId]);
  }
  limits(node?: string): Promise<HostLimits> {
    return this.#call('limits', node === undefined ? [] : [node]);
  }
  setLimits(limits: HostLimits, node?: string): Promise<void> {
    return this.#call('setLimits', node === undefined ? [limits] : [limits, node]);
  }
  nodeLimits(): Promise<NodeLimits[]> {
    return this.#call('nodeLimits', []);
  }
  admit(request: AdmitRequest): Promise<AdmitResult> {
    return this.#call('admit', [request]);
  }
  attachContainer(reservationId: string, containerId: string): Promise<void> {
    return this.#call('attachContainer', [reservationId, containerId]);
  }
  release(reservationId: string, claimId: string): Promise<ReleaseResult> {
    return this.#call('release', [reservationId, claimId]);
  }
  commitTerminal(commit: TerminalCommit): Promise<TerminalCommitResult> {
    return this.#call('commitTerminal', [commit]);
  }
  reservation(reservationId: string): Promise<Reservation | null> {
    return this.#call('reservation', [reservationId]);
  }
  reservationForClaim(claimId: string): Promise<Reservation | null> {
    return this.#call('reservationForClaim', [claimId]);
  }
  held(filter?: ReservationFilter): Promise<Reservation[]> {
    return this.#call('held', filter === undefined ? [] : [filter]);
  }
  reservationSources(reservationId: string): Promise<string[]> {
    return this.#call('reservationSources', [reservationId]);
  }
  portHolders(node: string, ports: readonly number[]): Promise<PortHolder[]> {
    return this.#call('portHolders', [node, ports]);
  }
  schemaVersion(): Promise<RegistrySchemaVersion> {
    return this.#call('schemaVersion', []);
  }
  board(filter?: BoardFilter): Promise<BoardRow[]> {
    return this.#call('board', filter === undefined ? [] : [filter]);
  }
  annotate(claimId: string, fields: BoardAnnotation): Promise<void> {
    return this.#call('annotate', [claimId, fields]);
  }
  /** Closes the connection in the worker, then ends the worker. */
  async close(): Promise<void> {
    if (this.#stopped !== null) return;
    try {
      await this.#call('close', []);
    } finally {
      // The worker ends once it answered `close` (its port closed); one that does not is ended.
      const timer = setTimeout(() => void this.#worker.terminate(), 1_000);
      await this.#exited;
      clearTimeout(timer);
    }
  }
}
