import * as Flags from '@oclif/core/flags';
import { BaseCommand } from '../cli/base-command.js';
import { readTokenFile } from '../cli/token-file.js';
import { bindAddressFlag, executorFlags, mountRootFlags, mountRootsFrom } from '../cli/flags.js';
import { executorFromFlags } from '../core/executor.js';
import { terminalSafe } from '../core/terminal-text.js';
import { type RunningServe, serveProcessParts, startServe } from '../serve-root.js';
import { compileServeOptions, SERVE_DEFAULTS, SERVE_MINIMUMS } from '../serve-options.js';

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
      default: SERVE_DEFAULTS.reapIntervalSec,
      min: 1,
    }),
    'stop-budget': Flags.integer({
      description: 'seconds between SIGTERM and kill when a session is deleted',
      default: SERVE_DEFAULTS.stopBudgetSec,
      min: 1,
    }),
    'allow-env': Flags.string({
      description:
        'a server variable that callers may reference as "${NAME}" (repeatable; none by default; never PG*, ROBOGUIDE_* or one holding the bearer token)',
      multiple: true,
    }),
    'max-execs-per-session': Flags.integer({
      description: 'execs running at once in one session (more: 429)',
      default: SERVE_DEFAULTS.limits.execsPerSession,
      min: 1,
    }),
    'max-execs': Flags.integer({
      description: 'execs running at once, all sessions together (more: 429)',
      default: SERVE_DEFAULTS.limits.execs,
      min: 1,
    }),
    'max-archives-per-session': Flags.integer({
      description: 'archive uploads and downloads at once in one session (more: 429)',
      default: SERVE_DEFAULTS.limits.archivesPerSession,
      min: 1,
    }),
    'max-archives': Flags.integer({
      description: 'archive uploads and downloads at once, all sessions together (more: 429)',
      default: SERVE_DEFAULTS.limits.archives,
      min: 1,
    }),
    'stream-buffer-cap': Flags.integer({
      description:
        'bytes a streamed (NDJSON) exec may hold for a client that reads too slowly; past it the exec is killed',
      default: SERVE_DEFAULTS.streamBufferCap,
      min: SERVE_MINIMUMS.streamBufferCap,
    }),
    'max-builds': Flags.integer({
      description: 'image builds (POST /v1/images) at once (more: 429)',
      default: SERVE_DEFAULTS.maxBuilds,
      min: 1,
    }),
    'max-build-context-mib': Flags.integer({
      description: 'largest build context (tar) POST /v1/images accepts, in MiB (more: 413)',
      default: SERVE_DEFAULTS.maxBuildContextMib,
      min: 1,
    }),
    'allow-builds': Flags.boolean({
      description:
        "turn on POST /v1/images (off: 403 E_BUILDS_DISABLED); a build step runs as root with the engine's default capabilities",
      default: SERVE_DEFAULTS.allowBuilds,
    }),
    'build-memory-mib': Flags.integer({
      description: 'memory (and memory+swap) of each build step, in MiB',
      default: SERVE_DEFAULTS.buildMemoryMib,
      min: SERVE_MINIMUMS.buildMemoryMib,
    }),
    'build-timeout-sec': Flags.integer({
      description: 'a build running longer is stopped',
      default: SERVE_DEFAULTS.buildTimeoutSec,
      min: 1,
    }),
    ...executorFlags,
  };

  async run(): Promise<void> {
    const { flags } = await this.parse(Serve);
    const executor = executorFromFlags(flags);
    // oclif has checked the relations: --token-file comes with --listen or --metrics-listen, and they with it.
    const token = flags['token-file'] !== undefined ? await readTokenFile(flags['token-file']) : undefined;
    const mountRoots = await mountRootsFrom(flags['mount-root'], flags['mount-root-only']);
    const options = compileServeOptions(flags, { token, mountRoots, environment: process.env });
    // Pairs run where --executor says; sessions (exec) stay on this host's engine (a swarm has no exec API).
    const running = await startServe({
      ...options,
      environment: process.env,
      ...(await serveProcessParts(executor)),
    });
    // One machine-readable line on stdout: clients and tests wait for it.
    this.log(JSON.stringify(readyLine(running)));
    await shutdownOnSignal(running);
  }
}

/** The line `serve` prints once it listens. */
function readyLine(running: RunningServe): Record<string, unknown> {
  const { adopted, reaped, released, foreign, endedExecs } = running.adoption;
  return {
    listening: running.socketPath,
    tcp_port: running.tcpPort,
    metrics_port: running.metricsPort,
    data_dir: running.dataDir,
    adopted,
    reaped,
    released_slots: released,
    foreign,
    ended_execs: endedExecs,
  };
}

/**
 * Resolves after the first SIGTERM/SIGINT has shut the server down (exit 1 when a slot was left or the shutdown
 * failed); a second signal exits at once.
 */
function shutdownOnSignal(running: RunningServe): Promise<void> {
  return new Promise<void>((resolve) => {
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
      void shutDown(running).finally(() => {
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
        resolve();
      });
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  });
}

/** Shuts the server down; what it could not finish is in each session's cleanup.json, and exit 1 says so. */
async function shutDown(running: RunningServe): Promise<void> {
  try {
    const { unreleased } = await running.shutdown();
    if (unreleased.length === 0) return;
    const ids = unreleased.map((u) => u.session_id).join(', ');
    process.stderr.write(
      `shutdown: ${unreleased.length} session slot(s) not released (${ids}): recorded in their cleanup.json; the next start releases them\n`,
    );
    process.exitCode = 1;
  } catch (err) {
    process.stderr.write(`shutdown failed: ${terminalSafe((err as Error).message)}\n`);
    process.exitCode = 1;
  }
}
