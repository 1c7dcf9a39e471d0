/**
 * A container runtime for one pair at a time, without an engine: `create` makes the container, `start` runs it;
 * it exits 0 at once (`exitAt: 'start'`) or runs until stopped (`exitAt: 'stop'`: `wait` resolves `aborted` when the
 * pair's terminate signal fires, and a stopped container exits 143). Removal makes it gone (inspect → null). For the
 * unit tests of what drives the `pair run` lifecycle (the serve API's pairs).
 */
import { PassThrough } from 'node:stream';
import type {
  ContainerOutput,
  ContainerSpec,
  ContainerState,
  WaitResult,
} from '../../src/app/ports/container-runtime.js';
import { UnscriptedRuntime } from './fakes.js';

export class FakePairRuntime extends UnscriptedRuntime {
  readonly created: ContainerSpec[] = [];
  readonly stopped: string[] = [];
  readonly removed: string[] = [];
  images = new Set(['roboguide/pair-driver:1']);
  exitAt: 'start' | 'stop' = 'start';
  #present = new Map<string, ContainerState>();
  #output: { stdout: PassThrough; stderr: PassThrough } | null = null;
  #exited: ((r: WaitResult) => void) | null = null;

  override info() {
    return Promise.resolve({ id: 'fake', version: '20.10.24', apiVersion: '1.41', runtimes: ['runc'] });
  }
  override imageExists(image: string) {
    return Promise.resolve(this.images.has(image));
  }
  override create(spec: ContainerSpec) {
    this.created.push(spec);
    const id = `c${this.created.length}`;
    this.#present.set(id, {
      id,
      status: 'created',
      exitCode: null,
      oomKilled: false,
      startedAt: null,
      finishedAt: null,
      labels: { ...spec.labels },
    });
    this.#output = { stdout: new PassThrough(), stderr: new PassThrough() };
    return Promise.resolve({ id, name: spec.name });
  }
  override attach(): Promise<ContainerOutput> {
    return Promise.resolve(this.#output!);
  }
  override follow(): Promise<ContainerOutput> {
    return Promise.resolve(this.#output!);
  }
  override start(id: string) {
    this.#set(id, 'running', null);
    this.#output!.stdout.write('working\n');
    if (this.exitAt === 'start') this.#exit(id, 0);
    return Promise.resolve();
  }
  override wait(
    id: string,
    options: { readonly deadlineMs: number; readonly signal?: AbortSignal },
  ): Promise<WaitResult> {
    const state = this.#present.get(id);
    if (state?.status === 'exited') return Promise.resolve({ kind: 'exited', exitCode: state.exitCode ?? 0 });
    if (options.signal?.aborted === true) return Promise.resolve({ kind: 'aborted' });
    return new Promise((resolve) => {
      this.#exited = resolve;
      options.signal?.addEventListener('abort', () => resolve({ kind: 'aborted' }), { once: true });
    });
  }
  override stop(id: string) {
    this.stopped.push(id);
    if (this.#present.get(id)?.status === 'running') this.#exit(id, 143);
    return Promise.resolve();
  }
  override remove(id: string) {
    this.removed.push(id);
    return Promise.resolve(this.#present.delete(id) ? ('removed' as const) : ('absent' as const));
  }
  override inspect(id: string) {
    return Promise.resolve(this.#present.get(id) ?? null);
  }
  override getArchive() {
    return Promise.resolve(null);
  }
  override listByLabel(labels: Readonly<Record<string, string>>) {
    return Promise.resolve(
      [...this.#present.values()].filter((c) => Object.entries(labels).every(([k, v]) => c.labels[k] === v)),
    );
  }
  override containerEventsSince() {
    return Promise.resolve({ actions: [], complete: true });
  }

  #set(id: string, status: ContainerState['status'], exitCode: number | null): void {
    const state = this.#present.get(id);
    if (state !== undefined) this.#present.set(id, { ...state, status, exitCode });
  }

  #exit(id: string, code: number): void {
    this.#set(id, 'exited', code);
    this.#output?.stdout.end();
    this.#output?.stderr.end();
    this.#exited?.({ kind: 'exited', exitCode: code });
  }
}
