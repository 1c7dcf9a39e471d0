import { dirname, resolve } from 'node:path';
import * as Flags from '@oclif/core/flags';
import { BaseCommand } from '../cli/base-command.js';
import { readTokenFile } from '../cli/token-file.js';
import { bindAddressFlag, executorFlags, mountRootFlags, mountRootsFrom } from '../cli/flags.js';
import { codeVersion } from '../command-root.js';
import { createExecutor, createStderrLogger } from '../composition-root.js';
import { executorFromFlags } from '../core/executor.js';
import { InternalError, InvalidInputError } from '../core/errors.js';
import { allowEnvRefusal } from '../app/serve/env-allow.js';
import { DEFAULT_CONCURRENCY_LIMITS } from '../app/serve/session-state.js';
import { terminalSafe } from '../core/terminal-text.js';
import {
  DEFAULT_BUILD_MEMORY_MIB,
  DEFAULT_BUILD_TIMEOUT_SEC,
  DEFAULT_MAX_BUILD_CONTEXT_BYTES,
  DEFAULT_MAX_BUILDS,
  DEFAULT_STREAM_BUFFER_CAP,
  startServe,
} from '../serve-root.js';

export default class Serve extends BaseCommand {
  static override summary =
    'Serve a local HTTP API (sessions with exec, archives, pairs) for backend adapters such as Harbor and SForge.';
  static override description = [
    'HTTP/1.1 + JSON on a unix socket (mode 0600), default $XDG_RUNTIME_DIR/roboguide-eval/api.sock (else under the',
    'state directory). --listen 127.0.0.1:PORT adds loopback TCP and requires --token-file (bearer token).',
    'Routes: GET /v1/health, /v1/openapi.json, /metrics (Prometheus; also alone on --metrics-listen); /v1/images (presence; POST: build from a tar context, cached, no pulls);',
    '/v1/sessions (create, get, list, exec, archive, keepalive, delete);',
    '/v1/pairs (start, status, logs, stop) with the `pair run` lifecycle. Evidence goes under --data-dir.',
    '',
    'Sessions expire after their TTL (renewed by every request) and are deleted with verification. On restart',
    'the server adopts its live sessions (label, session.json and registry row must agree; other containers with',
    'its labels are left alone and reported) and deletes expired ones. SIGTERM/SIGINT delete every session and',
    'stop running pairs before exiting (exit 1 when a slot could not be released: the next start releases it);',
    'a second signal exits at once. Callers may reference only the variables named with --allow-env.',
  ].join('\n');
  static override examples = [
    '<%= config.bin %> serve',
    '<%= config.bin %> serve --socket /run/roboguide-eval/api.sock --data-dir ./serve-data',
    '<%= config.bin %> serve --listen 127.0.0.1:8765 --token-file ~/.config/roboguide-eval/token',
  ];
  static override flags = {
    socket: Flags.string({
      description:
        'unix socket path (default $XDG_RUNTIME_DIR/roboguide-eval/api.sock); its folder must be yours and writable by no one else',
    }),
    listen: Flags.string({
      description: 'also listen on loopback TCP, 127.0.0.1:PORT (requires --token-file)',
      dependsOn: ['token-file'],
    }),
    'metrics-listen': Flags.string({
      description:
        'also serve GET /metrics (Prometheus) alone on loopback TCP, 127.0.0.1:PORT (requires --token-file); /metrics is on every listener anyway',
      dependsOn: ['token-file'],
    }),
    'token-file': Flags.string({
      description:
        'file holding the bearer token for --listen and --metrics-listen (must not be group/world readable)',
      relationships: [{ type: 'some', flags: ['listen', 'metrics-listen'] }],
    }),
    ...mountRootFlags,
    'data-dir': Flags.string({
      description: 'evidence of API pairs and sessions (default $XDG_STATE_HOME/roboguide-eval/serve)',
    }),
    registry: Flags.string({
      description: 'host capacity registry (default $XDG_STATE_HOME/roboguide-eval/registry.db)',
    }),
    'bind-address': bindAddressFlag,
    'reap-interval': Flags.integer({
      description: 'seconds between reaper passes over expired sessions',
      default: 5,
      min: 1,
    }),
    'stop-budget': Flags.integer({
      description: 'seconds between SIGTERM and kill when a session is deleted',
      default: 10,
      min: 1,
    }),
    'allow-env': Flags.string({
      description:
        'a server variable that callers may reference as "${NAME}" (repeatable; none by default; never PG*, ROBOGUIDE_* or one holding the bearer token)',
      multiple: true,
    }),
    'max-execs-per-session': Flags.integer({
      description: 'execs running at once in one session (more: 429)',
      default: DEFAULT_CONCURRENCY_LIMITS.execsPerSession,
      min: 1,
    }),
    'max-execs': Flags.integer({
      description: 'execs running at once, all sessions together (more: 429)',
      default: DEFAULT_CONCURRENCY_LIMITS.execs,
      min: 1,
    }),
    'max-archives-per-session': Flags.integer({
      description: 'archive uploads and downloads at once in one session (more: 429)',
      default: DEFAULT_CONCURRENCY_LIMITS.archivesPerSession,
      min: 1,
    }),
    'max-archives': Flags.integer({
      description: 'archive uploads and downloads at once, all sessions together (more: 429)',
      default: DEFAULT_CONCURRENCY_LIMITS.archives,
      min: 1,
    }),
    'stream-buffer-cap': Flags.integer({
      description:
        'bytes a streamed (NDJSON) exec may hold for a client that reads too slowly; past it the exec is killed',
      default: DEFAULT_STREAM_BUFFER_CAP,
      min: 65_536,
    }),
    'max-builds': Flags.integer({
      description: 'image builds (POST /v1/images) at once (more: 429)',
      default: DEFAULT_MAX_BUILDS,
      min: 1,
    }),
    'max-build-context-mib': Flags.integer({
      description: 'largest build context (tar) POST /v1/images accepts, in MiB (more: 413)',
      default: DEFAULT_MAX_BUILD_CONTEXT_BYTES / (1024 * 1024),
      min: 1,
    }),
    'allow-builds': Flags.boolean({
      description:
        "turn on POST /v1/images (off: 403 E_BUILDS_DISABLED); a build step runs as root with the engine's default capabilities",
      default: false,
    }),
    'build-memory-mib': Flags.integer({
      description: 'memory (and memory+swap) of each build step, in MiB',
      default: DEFAULT_BUILD_MEMORY_MIB,
      min: 64,
    }),
    'build-timeout-sec': Flags.integer({
      description: 'a build running longer is stopped',
      default: DEFAULT_BUILD_TIMEOUT_SEC,
      min: 1,
    }),
    ...executorFlags,
  };

  async run(): Promise<void> {
    const { flags } = await this.parse(Serve);
    const executor = executorFromFlags(flags);
    const listen = await parseListen('--listen', flags.listen, flags['token-file']);
    const metricsListen = await parseListen('--metrics-listen', flags['metrics-listen'], flags['token-file']);
    const allowEnv = checkAllowEnv(flags['allow-env'] ?? [], listen?.token ?? metricsListen?.token);
    const mountRoots = await mountRootsFrom(flags['mount-root'], flags['mount-root-only']);
    const logger = createStderrLogger();
    const running = await startServe({
      ...(flags.socket !== undefined ? { socketPath: flags.socket } : {}),
      ...(listen ? { listen } : {}),
      ...(metricsListen ? { metricsListen } : {}),
      ...(flags['data-dir'] !== undefined ? { dataDir: flags['data-dir'] } : {}),
      mountRoots,
      // The token file's folder is ours: no session mount or pair cwd may reach it.
      ...(flags['token-file'] !== undefined ? { ownedDirs: [dirname(resolve(flags['token-file']))] } : {}),
      ...(flags.registry !== undefined ? { registryPath: flags.registry } : {}),
      bindAddress: flags['bind-address'],
      reapIntervalMs: flags['reap-interval'] * 1000,
      stopBudgetSec: flags['stop-budget'],
      streamBufferCap: flags['stream-buffer-cap'],
      maxBuilds: flags['max-builds'],
      maxBuildContextBytes: flags['max-build-context-mib'] * 1024 * 1024,
      allowBuilds: flags['allow-builds'],
      buildMemoryMib: flags['build-memory-mib'],
      buildTimeoutSec: flags['build-timeout-sec'],
      allowEnv,
      limits: {
        execsPerSession: flags['max-execs-per-session'],
        execs: flags['max-execs'],
        archivesPerSession: flags['max-archives-per-session'],
        archives: flags['max-archives'],
      },
      environment: process.env,
      version: await codeVersion(),
      logger,
      // Pairs run where --executor says; sessions (exec) stay on this host's engine (a swarm has no exec API).
      ...(executor.kind === 'swarm' ? { pairExecutor: createExecutor(executor, [], logger) } : {}),
    });
    const { adopted, reaped, released, foreign, endedExecs } = running.adoption;
    // One machine-readable line on stdout: clients and tests wait for it.
    this.log(
      JSON.stringify({
        listening: running.socketPath,
        tcp_port: running.tcpPort,
        metrics_port: running.metricsPort,
        data_dir: running.dataDir,
        adopted,
        reaped,
        released_slots: released,
        foreign,
        ended_execs: endedExecs,
      }),
    );
    await new Promise<void>((resolve) => {
      let received: NodeJS.Signals | null = null;
      const onSignal = (signal: NodeJS.Signals): void => {
        if (received !== null) {
          process.stderr.write(
            `${signal} again: exiting now; sessions left are reaped by the next server start\n`,
          );
          process.exit(1);
        }
        received = signal;
        process.stderr.write(`${signal}: deleting every session (verified) and stopping running pairs…\n`);
        running
          .shutdown()
          .then(({ unreleased }) => {
            if (unreleased.length === 0) return;
            // It finished what it could; what it could not is in each session's cleanup.json. Exit 1 says so.
            const ids = unreleased.map((u) => u.session_id).join(', ');
            process.stderr.write(
              `shutdown: ${unreleased.length} session slot(s) not released (${ids}): recorded in their cleanup.json; the next start releases them\n`,
            );
            process.exitCode = 1;
          })
          .catch((err: unknown) => {
            process.stderr.write(`shutdown failed: ${terminalSafe((err as Error).message)}\n`);
            process.exitCode = 1;
          })
          .finally(() => {
            process.off('SIGINT', onSignal);
            process.off('SIGTERM', onSignal);
            resolve();
          });
      };
      process.on('SIGINT', onSignal);
      process.on('SIGTERM', onSignal);
    });
  }
}

/** `--listen` or `--metrics-listen`: loopback only, and the bearer token of `--token-file` required with either. */
async function parseListen(
  flag: '--listen' | '--metrics-listen',
  listen: string | undefined,
  tokenFile: string | undefined,
): Promise<{ host: string; port: number; token: string } | undefined> {
  if (listen === undefined) return undefined;
  const m = /^(127\.0\.0\.1|localhost|\[::1\]):(\d{1,5})$/.exec(listen);
  const port = Number(m?.[2]);
  if (m === null || port > 65_535) {
    throw new InvalidInputError('E_USAGE', 'invalid flags', [
      { path: flag, rule: 'must be 127.0.0.1:PORT (loopback only)' },
    ]);
  }
  // The flag table declares that --listen and --metrics-listen depend on --token-file: oclif refused its absence.
  if (tokenFile === undefined) throw new InternalError(`${flag} was parsed without --token-file`);
  const token = await readTokenFile(tokenFile);
  const host = m[1] === '[::1]' ? '::1' : '127.0.0.1';
  return { host, port, token };
}

/** `--allow-env` names, each checked (exit 2 naming the refused ones); duplicates collapse. */
function checkAllowEnv(names: readonly string[], token: string | undefined): string[] {
  const issues = names.flatMap((name) => {
    const rule = allowEnvRefusal(name, process.env, token);
    return rule === null ? [] : [{ path: '--allow-env', rule }];
  });
  if (issues.length > 0) throw new InvalidInputError('E_USAGE', 'invalid flags', issues);
  return [...new Set(names)];
}
