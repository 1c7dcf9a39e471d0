import { PassThrough, type Readable } from 'node:stream';
import { EngineError } from '../../src/app/ports/engine-error.js';
import type { EngineFault } from '../../src/core/engine-fault.js';
import type {
  ContainerHandle,
  ContainerOutput,
  ContainerSpec,
  ContainerState,
  WaitResult,
} from '../../src/app/ports/container-runtime.js';
import { UnscriptedRuntime } from './fakes.js';

/** The engine's typed failure, as the Docker adapter throws it. */
export function engineError(
  fault: EngineFault,
  statusCode: number | null = 500,
  engineMessage = `engine: ${fault}`,
): EngineError {
  return new EngineError(fault, engineMessage, { statusCode, engineMessage });
}

type Step<T> = T | Error | ((...args: never[]) => Promise<T>);

/**
 * A container engine scripted step by step, without an engine: each call takes its next scripted answer (an
 * Error is thrown); what the lifecycle asked is recorded. The container prints `output` on stdout when started and
 * is gone once removed (unless `removeTakesNoEffect`). What no test scripts rejects by name (UnscriptedRuntime).
 */
export class ScriptedRuntime extends UnscriptedRuntime {
  readonly calls: string[] = [];
  readonly stops: { id: string; timeoutSec: number }[] = [];
  readonly waitDeadlines: number[] = [];
  created: ContainerSpec | null = null;
  present = false;
  output = 'out\n';
  createAnswer: Step<ContainerHandle> = { id: 'c1', name: 'n' };
  startAnswer: Error | null = null;
  /** Answers of wait in turn; `'until_signal'` waits for the stop signal (a running container). */
  waits: (WaitResult | Error | 'until_signal')[] = [{ kind: 'exited', exitCode: 0 }];
  /** Answers of inspect in turn while present (the last repeats); `'refused'`: the engine does not answer; null: 404. */
  inspects: (ContainerState | 'refused' | null)[] = [state('exited', 0)];
  removeTakesNoEffect = false;
  #out: { stdout: PassThrough; stderr: PassThrough } | null = null;

  override create(spec: ContainerSpec): Promise<ContainerHandle> {
    this.calls.push('create');
    this.created = spec;
    const answer = this.createAnswer;
    if (answer instanceof Error) return Promise.reject(answer);
    this.present = true;
    return typeof answer === 'function' ? answer() : Promise.resolve(answer);
  }
  override attach(): Promise<ContainerOutput> {
    this.calls.push('attach');
    this.#out = { stdout: new PassThrough(), stderr: new PassThrough() };
    return Promise.resolve(this.#out);
  }
  override start(): Promise<void> {
    this.calls.push('start');
    const out = this.#out;
    // A container that never ran has no output: its streams end empty.
    if (out !== null) {
      out.stdout.end(this.startAnswer === null ? this.output : undefined);
      out.stderr.end();
    }
    return this.startAnswer === null ? Promise.resolve() : Promise.reject(this.startAnswer);
  }
  override wait(_id: string, options: { deadlineMs: number; signal?: AbortSignal }): Promise<WaitResult> {
    this.calls.push('wait');
    this.waitDeadlines.push(options.deadlineMs);
    const next = this.waits.length > 1 ? this.waits.shift()! : this.waits[0]!;
    if (next instanceof Error) return Promise.reject(next);
    if (next !== 'until_signal') return Promise.resolve(next);
    return new Promise((resolve) => {
      if (options.signal?.aborted === true) resolve({ kind: 'aborted' });
      options.signal?.addEventListener('abort', () => resolve({ kind: 'aborted' }), { once: true });
    });
  }
  override stop(id: string, timeoutSec: number): Promise<void> {
    this.calls.push('stop');
    this.stops.push({ id, timeoutSec });
    for (const stream of [this.#out?.stdout, this.#out?.stderr])
      if (stream !== undefined && !stream.writableEnded) stream.end();
    return Promise.resolve();
  }
  override remove(): Promise<'removed'> {
    this.calls.push('remove');
    if (!this.removeTakesNoEffect) this.present = false;
    // A removed container's attached streams end.
    for (const stream of [this.#out?.stdout, this.#out?.stderr])
      if (stream !== undefined && !stream.writableEnded) stream.end();
    return Promise.resolve('removed');
  }
  override inspect(): Promise<ContainerState | null> {
    if (!this.present) return Promise.resolve(null);
    const next = this.inspects.length > 1 ? this.inspects.shift()! : this.inspects[0]!;
    return next === 'refused'
      ? Promise.reject(engineError('engine_unavailable', null))
      : Promise.resolve(next);
  }
  override follow(): Promise<ContainerOutput> {
    this.calls.push('follow');
    return Promise.resolve({ stdout: new PassThrough().end(this.output), stderr: new PassThrough().end() });
  }
  override getArchive(): Promise<Readable | null> {
    return Promise.resolve(null);
  }
  override listByLabel(): Promise<ContainerState[]> {
    return Promise.resolve(this.present ? [state('created', null)] : []);
  }
  /** The engine's buffered events for the container (a hint), and the moments they were asked from. */
  events: { actions: string[]; complete: boolean } = { actions: [], complete: false };
  readonly eventsSince: number[] = [];
  override containerEventsSince(
    _id: string,
    sinceMs: number,
  ): Promise<{ actions: string[]; complete: boolean }> {
    this.eventsSince.push(sinceMs);
    return Promise.resolve(this.events);
  }
}

export function state(
  status: ContainerState['status'],
  exitCode: number | null,
  finishedAt: string | null = null,
): ContainerState {
  return { id: 'c1', status, exitCode, oomKilled: false, startedAt: null, finishedAt, labels: {} };
}
