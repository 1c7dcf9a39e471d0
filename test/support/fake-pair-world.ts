/**
 * Hand-written fakes behind the ports a pair needs (no engine, no /proc): a container runtime whose "driver" writes
 * its outcome into the private outcome folder it was given and prints a line on each stream, a host whose identity
 * and live processes the test decides, and the deps `pair run` / a batch pair take, on real temp directories.
 */
import { PassThrough } from 'node:stream';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { fileOutcomeReader } from '../../src/adapters/outcome-reader.js';
import type { ExecutePairDeps } from '../../src/app/pair/execute-pair-types.js';
import type {
  ContainerHandle,
  ContainerOutput,
  ContainerRuntime,
  ContainerSpec,
  ContainerState,
  EngineInfo,
  WaitResult,
} from '../../src/app/ports/container-runtime.js';
import type { HostIdentity } from '../../src/app/ports/host-identity.js';
import type { ProcessIdentity } from '../../src/core/process-identity.js';
import { silentLogger } from '../../src/app/ports/logger.js';
import { clockAt } from './fake-time.js';

export const HOST_BOOT = 'boot-fake-1';
export const SUPERVISOR: ProcessIdentity = { pid: 4242, start_ticks: '777', boot_id: HOST_BOOT };

/** A host whose current process and boot id are fixed, and whose live processes are the pids in `alive`. */
export class FakeHost implements HostIdentity {
  readonly alive = new Set<number>();
  bootIdNow: string | null = HOST_BOOT;
  constructor(readonly me: ProcessIdentity = SUPERVISOR) {}
  current(): Promise<ProcessIdentity> {
    return Promise.resolve(this.me);
  }
  bootId(): Promise<string | null> {
    return Promise.resolve(this.bootIdNow);
  }
  isAlive(identity: ProcessIdentity): boolean {
    return this.alive.has(identity.pid) && identity.boot_id === this.bootIdNow;
  }
}

interface FakeContainer {
  readonly id: string;
  readonly spec: ContainerSpec;
  status: ContainerState['status'];
  output: ContainerOutput;
}

/**
 * A container runtime without an engine. `outcome` is what the driver writes at its outcome path (null: nothing);
 * `images` the images present. Faults: `failCreate` rejects `create` with that error.
 */
export class FakePairRuntime implements ContainerRuntime {
  readonly containers = new Map<string, FakeContainer>();
  readonly images = new Set<string>(['driver:1']);
  outcome: string | null =
    '{"job_id":"j1","infrastructure_failure":false,"fatal_failure":false,"arms":{"a":true}}';
  failCreate: Error | null = null;
  created = 0;
  removed = 0;

  info(): Promise<EngineInfo> {
    return Promise.resolve({ id: 'fake-engine', version: '0', apiVersion: '1.43', runtimes: ['runc'] });
  }
  imageExists(image: string): Promise<boolean> {
    return Promise.resolve(this.images.has(image));
  }
  create(spec: ContainerSpec): Promise<ContainerHandle> {
    if (this.failCreate !== null) return Promise.reject(this.failCreate);
    this.created++;
    const id = `c${this.created}`.padEnd(64, '0');
    this.containers.set(id, {
      id,
      spec,
      status: 'created',
      output: { stdout: new PassThrough(), stderr: new PassThrough() },
    });
    return Promise.resolve({ id, name: spec.name });
  }
  attach(id: string): Promise<ContainerOutput> {
    return Promise.resolve(this.#get(id).output);
  }
  follow(id: string): Promise<ContainerOutput> {
    return Promise.resolve(this.#get(id).output);
  }
  start(id: string): Promise<void> {
    const c = this.#get(id);
    c.status = 'exited';
    const outcomeBind = c.spec.binds.find((b) => b.collect === true);
    const outcomeName = c.spec.env['ROBOGUIDE_OUTCOME_PATH']?.split('/').at(-1);
    if (this.outcome !== null && outcomeBind !== undefined && outcomeName !== undefined) {
      mkdirSync(outcomeBind.hostPath, { recursive: true });
      writeFileSync(join(outcomeBind.hostPath, outcomeName), this.outcome);
    }
    (c.output.stdout as PassThrough).end('out\n');
    (c.output.stderr as PassThrough).end('err\n');
    return Promise.resolve();
  }
  wait(): Promise<WaitResult> {
    return Promise.resolve({ kind: 'exited', exitCode: 0 });
  }
  stop(id: string): Promise<void> {
    const c = this.containers.get(id);
    if (c !== undefined) c.status = 'exited';
    return Promise.resolve();
  }
  remove(id: string): Promise<'removed' | 'absent'> {
    if (!this.containers.delete(id)) return Promise.resolve('absent');
    this.removed++;
    return Promise.resolve('removed');
  }
  inspect(id: string): Promise<ContainerState | null> {
    const c = this.containers.get(id);
    return Promise.resolve(c === undefined ? null : this.#state(c));
  }
  environmentOf(id: string): Promise<Record<string, string> | null> {
    const c = this.containers.get(id);
    return Promise.resolve(c === undefined ? null : { ...c.spec.env });
  }
  getArchive(): Promise<null> {
    return Promise.resolve(null);
  }
  listByLabel(labels: Readonly<Record<string, string>>): Promise<ContainerState[]> {
    const matches = [...this.containers.values()].filter((c) =>
      Object.entries(labels).every(([k, v]) => c.spec.labels[k] === v),
    );
    return Promise.resolve(matches.map((c) => this.#state(c)));
  }
  containerEventsSince(): Promise<{ actions: string[]; complete: boolean }> {
    return Promise.resolve({ actions: [], complete: true });
  }

  /** A container left behind by a killed run: present, exited, with these labels and environment. */
  leave(spec: Pick<ContainerSpec, 'labels' | 'env'>): string {
    this.created++;
    const id = `left${this.created}`.padEnd(64, '0');
    const full = {
      name: id,
      image: 'driver:1',
      cmd: [],
      workingDir: '/',
      binds: [],
      ports: [],
      bindAddress: '127.0.0.1',
      deviceRequests: [],
      stopTimeoutSec: 1,
      ...spec,
    };
    this.containers.set(id, {
      id,
      spec: full,
      status: 'exited',
      output: { stdout: new PassThrough(), stderr: new PassThrough() },
    });
    return id;
  }

  #get(id: string): FakeContainer {
    const c = this.containers.get(id);
    if (c === undefined) throw Object.assign(new Error(`no such container ${id}`), { statusCode: 404 });
    return c;
  }

  #state(c: FakeContainer): ContainerState {
    return {
      id: c.id,
      status: c.status,
      exitCode: c.status === 'exited' ? 0 : null,
      oomKilled: false,
      startedAt: null,
      finishedAt: null,
      labels: c.spec.labels,
    };
  }
}

/** The lifecycle's deps on the fakes: no session archive, no diagnosis, a fixed clock. */
export function fakeExecuteDeps(
  runtime: ContainerRuntime,
  host: HostIdentity,
  overrides: Partial<ExecutePairDeps> = {},
): ExecutePairDeps {
  return {
    runtime,
    clock: clockAt(() => new Date('2026-12-03T08:00:00Z')),
    logger: silentLogger,
    fs: new NodeFileSystem(),
    host,
    outcomes: fileOutcomeReader,
    createRedactor: () => new PassThrough(),
    extractSessions: () => Promise.reject(new Error('no archive in a fake')),
    diagnose: () => Promise.resolve(null),
    verifyAbsentTimeoutMs: 500,
    ...overrides,
  };
}
