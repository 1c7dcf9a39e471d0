import { dirname, resolve } from 'node:path';
import { allowEnvRefusal } from './app/serve/env-allow.js';
import { DEFAULT_CONCURRENCY_LIMITS, type ConcurrencyLimits } from './app/serve/session-state.js';
import { DEFAULT_BIND_ADDRESS } from './core/bind-address.js';
import { InternalError, InvalidInputError } from './core/errors.js';
import type { DockerContainerRuntime } from './adapters/docker/docker-container-runtime.js';
import type { EgressGate } from './app/ports/egress.js';
import type { Executor } from './app/ports/executor-inventory.js';
import type { Logger } from './app/ports/logger.js';

/**
 * `roboguide-eval serve`'s options compiled once (issue 44; Temporal's `compileWorkerOptions` is the model): the
 * defaults are defined here only, the flag table's defaults and help read them, and one pure function turns the
 * parsed flags into the options `startServe` takes. No I/O here: the command reads the token file and resolves the
 * mount roots, and hands them in.
 */

const MIB = 1024 * 1024;

/** Every default of `serve`, once. */
export const SERVE_DEFAULTS = {
  /** `--bind-address`: where published ports bind. */
  bindAddress: DEFAULT_BIND_ADDRESS,
  /** `--reap-interval`: seconds between reaper passes over expired sessions. */
  reapIntervalSec: 5,
  /** `--stop-budget`: seconds between SIGTERM and kill when a session is deleted. */
  stopBudgetSec: 10,
  /** Bytes of output one buffered exec may return (no flag). */
  maxOutputBytes: 16 * MIB,
  /** `--stream-buffer-cap`: what one NDJSON exec stream may hold for a slow client (4 MiB). */
  streamBufferCap: 4 * MIB,
  /** `--max-builds`: image builds (POST /v1/images) at once. */
  maxBuilds: 2,
  /** `--max-build-context-mib`: the largest build context, in MiB. */
  maxBuildContextMib: 1024,
  /** `--allow-builds`: POST /v1/images is off unless asked for. */
  allowBuilds: false,
  /** `--build-memory-mib`: each build step's memory (and memory+swap). */
  buildMemoryMib: 2048,
  /** `--build-timeout-sec`: a build's wall time. */
  buildTimeoutSec: 1800,
  /** `--max-execs-per-session`, `--max-execs`, `--max-archives-per-session`, `--max-archives`. */
  limits: DEFAULT_CONCURRENCY_LIMITS,
} as const;

/** The least value each numeric flag accepts (oclif's `min`). */
export const SERVE_MINIMUMS = {
  streamBufferCap: 65_536,
  buildMemoryMib: 64,
} as const;

/** A loopback TCP listener with its bearer token. */
export interface Listener {
  readonly host: string;
  readonly port: number;
  readonly token: string;
}

/** The parsed flags of `serve` that shape its options (oclif has applied the defaults above). */
export interface ServeFlags {
  readonly socket?: string | undefined;
  readonly listen?: string | undefined;
  readonly 'metrics-listen'?: string | undefined;
  readonly 'token-file'?: string | undefined;
  readonly 'data-dir'?: string | undefined;
  readonly registry?: string | undefined;
  readonly 'bind-address': string;
  readonly 'reap-interval': number;
  readonly 'stop-budget': number;
  readonly 'allow-env'?: readonly string[] | undefined;
  readonly 'max-execs-per-session': number;
  readonly 'max-execs': number;
  readonly 'max-archives-per-session': number;
  readonly 'max-archives': number;
  readonly 'stream-buffer-cap': number;
  readonly 'max-builds': number;
  readonly 'max-build-context-mib': number;
  readonly 'allow-builds': boolean;
  readonly 'build-memory-mib': number;
  readonly 'build-timeout-sec': number;
}

/** What the command found outside the flags: the token of `--token-file`, the real mount roots, the environment. */
export interface ServeFlagContext {
  readonly token?: string | undefined;
  readonly mountRoots: readonly string[];
  readonly environment: Readonly<Record<string, string | undefined>>;
}

/** The options of `startServe` that come from the command line, every default applied. */
export interface CompiledServeOptions {
  readonly socketPath?: string;
  readonly listen?: Listener;
  readonly metricsListen?: Listener;
  readonly dataDir?: string;
  readonly mountRoots: readonly string[];
  readonly ownedDirs?: readonly string[];
  readonly registryPath?: string;
  readonly bindAddress: string;
  readonly reapIntervalMs: number;
  readonly stopBudgetSec: number;
  readonly maxOutputBytes: number;
  readonly streamBufferCap: number;
  readonly maxBuilds: number;
  readonly maxBuildContextBytes: number;
  readonly allowBuilds: boolean;
  readonly buildMemoryMib: number;
  readonly buildTimeoutSec: number;
  readonly allowEnv: readonly string[];
  readonly limits: ConcurrencyLimits;
}

/** The tuning `startServe` uses, from options that may leave any of it out (library and test callers). */
export type ServeTuning = Pick<
  CompiledServeOptions,
  | 'bindAddress'
  | 'reapIntervalMs'
  | 'stopBudgetSec'
  | 'maxOutputBytes'
  | 'streamBufferCap'
  | 'maxBuilds'
  | 'maxBuildContextBytes'
  | 'allowBuilds'
  | 'buildMemoryMib'
  | 'buildTimeoutSec'
  | 'allowEnv'
  | 'limits'
>;

/** Each tuning field the caller gave, else its default. */
export function serveTuning(options: Partial<ServeTuning>): ServeTuning {
  const d = SERVE_DEFAULTS;
  return {
    bindAddress: options.bindAddress ?? d.bindAddress,
    reapIntervalMs: options.reapIntervalMs ?? d.reapIntervalSec * 1000,
    stopBudgetSec: options.stopBudgetSec ?? d.stopBudgetSec,
    maxOutputBytes: options.maxOutputBytes ?? d.maxOutputBytes,
    streamBufferCap: options.streamBufferCap ?? d.streamBufferCap,
    maxBuilds: options.maxBuilds ?? d.maxBuilds,
    maxBuildContextBytes: options.maxBuildContextBytes ?? d.maxBuildContextMib * MIB,
    allowBuilds: options.allowBuilds ?? d.allowBuilds,
    buildMemoryMib: options.buildMemoryMib ?? d.buildMemoryMib,
    buildTimeoutSec: options.buildTimeoutSec ?? d.buildTimeoutSec,
    allowEnv: options.allowEnv ?? [],
    limits: options.limits ?? d.limits,
  };
}

/**
 * The parsed flags of `serve` as `startServe`'s options. Throws exit 2 naming the flag for a listener that is not
 * loopback and for an `--allow-env` name that is refused.
 */
export function compileServeOptions(flags: ServeFlags, context: ServeFlagContext): CompiledServeOptions {
  const listen = parseListen('--listen', flags.listen, context.token);
  const metricsListen = parseListen('--metrics-listen', flags['metrics-listen'], context.token);
  const tokenFile = flags['token-file'];
  return {
    ...(flags.socket !== undefined ? { socketPath: flags.socket } : {}),
    ...(listen ? { listen } : {}),
    ...(metricsListen ? { metricsListen } : {}),
    ...(flags['data-dir'] !== undefined ? { dataDir: flags['data-dir'] } : {}),
    mountRoots: context.mountRoots,
    // The token file's folder is ours: no session mount or pair cwd may reach it.
    ...(tokenFile !== undefined ? { ownedDirs: [dirname(resolve(tokenFile))] } : {}),
    ...(flags.registry !== undefined ? { registryPath: flags.registry } : {}),
    bindAddress: flags['bind-address'],
    reapIntervalMs: flags['reap-interval'] * 1000,
    stopBudgetSec: flags['stop-budget'],
    maxOutputBytes: SERVE_DEFAULTS.maxOutputBytes,
    streamBufferCap: flags['stream-buffer-cap'],
    maxBuilds: flags['max-builds'],
    maxBuildContextBytes: flags['max-build-context-mib'] * MIB,
    allowBuilds: flags['allow-builds'],
    buildMemoryMib: flags['build-memory-mib'],
    buildTimeoutSec: flags['build-timeout-sec'],
    allowEnv: checkAllowEnv(flags['allow-env'] ?? [], context.environment, context.token),
    limits: {
      execsPerSession: flags['max-execs-per-session'],
      execs: flags['max-execs'],
      archivesPerSession: flags['max-archives-per-session'],
      archives: flags['max-archives'],
    },
  };
}

/** `--listen` or `--metrics-listen`: loopback only, with the bearer token of `--token-file`. */
function parseListen(
  flag: '--listen' | '--metrics-listen',
  listen: string | undefined,
  token: string | undefined,
): Listener | undefined {
  if (listen === undefined) return undefined;
  const m = /^(127\.0\.0\.1|localhost|\[::1\]):(\d{1,5})$/.exec(listen);
  const port = Number(m?.[2]);
  if (m === null || port > 65_535) {
    throw new InvalidInputError('E_USAGE', 'invalid flags', [
      { path: flag, rule: 'must be 127.0.0.1:PORT (loopback only)' },
    ]);
  }
  // The flag table declares that --listen and --metrics-listen depend on --token-file: oclif refused its absence.
  if (token === undefined) throw new InternalError(`${flag} was compiled without the token of --token-file`);
  const host = m[1] === '[::1]' ? '::1' : '127.0.0.1';
  return { host, port, token };
}

/** `--allow-env` names, each checked (exit 2 naming the refused ones); duplicates collapse. */
function checkAllowEnv(
  names: readonly string[],
  environment: Readonly<Record<string, string | undefined>>,
  token: string | undefined,
): string[] {
  const issues = names.flatMap((name) => {
    const rule = allowEnvRefusal(name, environment, token);
    return rule === null ? [] : [{ path: '--allow-env', rule }];
  });
  if (issues.length > 0) throw new InvalidInputError('E_USAGE', 'invalid flags', issues);
  return [...new Set(names)];
}

/** What `startServe` takes: the compiled options (any tuning left out takes its default) and the wiring. */
export interface ServeOptions {
  readonly socketPath?: string;
  readonly listen?: { readonly host: string; readonly port: number; readonly token: string };
  /** `--metrics-listen`: loopback TCP serving only GET /metrics, with the bearer token (issue 45). */
  readonly metricsListen?: { readonly host: string; readonly port: number; readonly token: string };
  readonly dataDir?: string;
  /** `--mount-root` (real paths): when given, every session mount and pair cwd must lie under one of them. */
  readonly mountRoots?: readonly string[];
  /** Folders of ours no mount may reach besides the data directory (the token file's folder). */
  readonly ownedDirs?: readonly string[];
  readonly registryPath?: string;
  readonly bindAddress?: string;
  readonly reapIntervalMs?: number;
  readonly stopBudgetSec?: number;
  readonly maxOutputBytes?: number;
  /** Bytes an NDJSON exec stream may hold for a client that reads too slowly; past it the exec is killed. */
  readonly streamBufferCap?: number;
  /** The server's environment: its paths come from here; `${NAME}` references only reach `allowEnv` names. */
  readonly environment: Readonly<Record<string, string | undefined>>;
  /** `--allow-env`: the only variables sessions and pairs may reference (checked by the command). */
  readonly allowEnv?: readonly string[];
  readonly limits?: ConcurrencyLimits;
  /** Image builds at once (`--max-builds`; more: 429) and the largest build context (`--max-build-context-mib`; more: 413). */
  readonly maxBuilds?: number;
  readonly maxBuildContextBytes?: number;
  /** `--allow-builds`: POST /v1/images is refused (403 E_BUILDS_DISABLED) unless set (a build step runs as root). */
  readonly allowBuilds?: boolean;
  /** Each build step's memory and memory+swap (`--build-memory-mib`) and a build's wall time (`--build-timeout-sec`). */
  readonly buildMemoryMib?: number;
  readonly buildTimeoutSec?: number;
  readonly version: string;
  readonly logger: Logger;
  /** The engine to use (default: DOCKER_HOST or the local socket). */
  readonly runtime?: DockerContainerRuntime;
  /** Where `/v1/pairs` run (`--executor swarm`); default: `runtime`. Sessions always use `runtime`. */
  readonly pairExecutor?: Executor;
  /** Sessions' egress proxy (docs/spec.md §5.6); default: the local engine's, as pairs get it (absent there: none). */
  readonly egress?: EgressGate;
}
