/**
 * `roboguide-eval/testing`: a test kit for TypeScript suites that use roboguide-eval as their execution backend.
 * Framework-agnostic (assertions throw plain Errors), real parts only: the real engine, the real server process.
 */
// First: on an older Node this refuses with what to do, before anything below needs Node 24.
import './require-node-24.js';
import { utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { DockerContainerRuntime } from '../adapters/docker/docker-container-runtime.js';
import { makeDirs } from '../adapters/fs/make-dirs.js';
import { PAIR_DRIVER_IMAGE } from '../core/synthetic-images.js';
import type { ApiClient } from './api-client.js';
import { removeVerified } from './leftovers.js';
import { RoboguideServer, type RoboguideServerOptions, type ServerStartReport } from './roboguide-server.js';

export {
  ApiCallError,
  ApiClient,
  type ApiClientOptions,
  type ApiResponse,
  type RequestOptions,
} from './api-client.js';
export { PAIR_DRIVER_IMAGE };
export { buildPairDriverImage } from './images.js';
export {
  PairDriverContainer,
  StartedPairDriverContainer,
  type DriverOutcome,
  type DriverSession,
} from './pair-driver-container.js';
export {
  RoboguideServer,
  StartedRoboguideServer,
  type RoboguideServerOptions,
  type ServerStartReport,
  type StoppedRoboguideServer,
} from './roboguide-server.js';
export { sweepTestKitLeftovers, TESTKIT_LABEL, TESTKIT_OWNER_LABEL, type SweepReport } from './leftovers.js';

/** Containers carrying every given label (`{key: ''}` matches the key with any value). */
export async function containersLabelled(
  labels: Readonly<Record<string, string>>,
  runtime = new DockerContainerRuntime(),
): Promise<string[]> {
  return (await runtime.listByLabel(labels)).map((c) => c.id);
}

/**
 * Throws when a container with these labels still exists. It removes them first (so one failure does not spill
 * into the next test) and names them in the error.
 */
export async function expectNoContainersLeft(
  labels: Readonly<Record<string, string>> | string,
): Promise<void> {
  const wanted =
    typeof labels === 'string'
      ? {
          [labels.split('=')[0] ?? labels]: labels.includes('=') ? labels.slice(labels.indexOf('=') + 1) : '',
        }
      : labels;
  const runtime = new DockerContainerRuntime();
  const left = await containersLabelled(wanted, runtime);
  await removeVerified(left, runtime);
  if (left.length > 0)
    throw new Error(`containers left with labels ${JSON.stringify(wanted)}: ${left.join(', ')}`);
}

export interface FakeCodexSessionOptions {
  /** A provider failure to record (the last event of the session), e.g. `{ httpStatus: 429 }`. */
  readonly failure?: { readonly httpStatus: number; readonly kind?: string };
  readonly lines?: readonly unknown[];
  readonly mtime?: Date;
}

/** Write a Codex session file (`rollout-*.jsonl`, one JSON event a line) under `dir/YYYY/MM/DD/`; returns its path. */
export async function writeFakeCodexSession(
  dir: string,
  options: FakeCodexSessionOptions = {},
): Promise<string> {
  const when = options.mtime ?? new Date();
  const day = join(
    dir,
    String(when.getUTCFullYear()),
    String(when.getUTCMonth() + 1).padStart(2, '0'),
    String(when.getUTCDate()).padStart(2, '0'),
  );
  await makeDirs(day);
  const lines: unknown[] = [
    { type: 'session_meta', payload: { id: 'fake', cwd: '/work' } },
    { type: 'response_item', payload: { type: 'message', role: 'assistant' } },
    ...(options.lines ?? []),
  ];
  if (options.failure) {
    const kind = options.failure.kind ?? 'response_too_many_failed_attempts';
    lines.push({
      type: 'event_msg',
      payload: {
        type: 'error',
        message: 'provider error',
        codex_error_info: { [kind]: { http_status_code: options.failure.httpStatus } },
      },
    });
  }
  const path = join(day, `rollout-${when.toISOString().replace(/[:.]/g, '-')}.jsonl`);
  await writeFile(path, `${lines.map((l) => JSON.stringify(l)).join('\n')}\n`);
  await utimes(path, when, when);
  return path;
}

/** @deprecated since 0.1: use {@link RoboguideServerOptions} (`new RoboguideServer(options)`). */
export type TestServerOptions = RoboguideServerOptions;

/** @deprecated since 0.1: use {@link StartedRoboguideServer} (`stop(signal)` is its `kill(signal)`). */
export interface TestServer {
  readonly workDir: string;
  readonly socketPath: string;
  readonly dataDir: string;
  readonly registryPath: string;
  readonly client: ApiClient;
  readonly process: ChildProcess;
  /** The server's first stdout line: what it adopted, reaped and released at start. */
  readonly started: ServerStartReport;
  /** The server's stderr so far (its last 64 KiB): logs, shutdown messages. */
  stderr(): string;
  /** Send a signal (default SIGTERM) and wait for the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  /** Stop it if running and delete its temporary folder. */
  dispose(): Promise<void>;
}

/**
 * @deprecated since 0.1, kept for one release: `await new RoboguideServer(options).start()`. Start
 * `roboguide-eval serve` as a real process on a temporary socket, data dir and registry.
 */
export async function startTestServer(options: TestServerOptions = {}): Promise<TestServer> {
  const s = await new RoboguideServer(options).start();
  return {
    workDir: s.workDir,
    socketPath: s.socketPath,
    dataDir: s.dataDir,
    registryPath: s.registryPath,
    client: s.client,
    process: s.process,
    started: s.started,
    stderr: () => s.stderr(),
    stop: (signal) => s.kill(signal),
    dispose: async () => {
      await s.kill('SIGTERM');
      await s.release();
    },
  };
}
