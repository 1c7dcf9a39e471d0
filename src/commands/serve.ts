import { readFile, stat } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { Flags } from '@oclif/core';
import { BaseCommand } from '../cli/base-command.js';
import { executorFlags, mountRootFlag, mountRootsFrom } from '../cli/flags.js';
import { codeVersion } from '../command-root.js';
import { createExecutorRuntime, createStderrLogger } from '../composition-root.js';
import { executorFromFlags } from '../core/executor.js';
import { InvalidInputError } from '../core/errors.js';
import { startServe } from '../serve-root.js';

export default class Serve extends BaseCommand {
  static override summary = 'Serve a local HTTP API (sessions with exec, archives, pairs) for backend adapters such as Harbor and SForge.';
  static override description = [
    'HTTP/1.1 + JSON on a unix socket (mode 0600), default $XDG_RUNTIME_DIR/roboguide-eval/api.sock (else under the',
    'state directory). --listen 127.0.0.1:PORT adds loopback TCP and requires --token-file (bearer token).',
    'Routes: GET /v1/health, /v1/openapi.json; /v1/sessions (create, list, exec, archive, keepalive, delete);',
    '/v1/pairs (start, status, logs, stop) with the `pair run` lifecycle. Evidence goes under --data-dir.',
    '',
    'Sessions expire after their TTL (renewed by every request) and are deleted with verification. On restart',
    'the server adopts its live sessions (by label and registry row) and deletes expired ones. SIGTERM/SIGINT',
    'delete every session and stop running pairs before exiting; a second signal exits at once.',
  ].join('\n');
  static override examples = [
    '<%= config.bin %> serve',
    '<%= config.bin %> serve --socket /tmp/rg.sock --data-dir ./serve-data',
    '<%= config.bin %> serve --listen 127.0.0.1:8765 --token-file ~/.config/roboguide-eval/token',
  ];
  static override flags = {
    socket: Flags.string({ description: 'unix socket path (default $XDG_RUNTIME_DIR/roboguide-eval/api.sock)' }),
    listen: Flags.string({ description: 'also listen on loopback TCP, 127.0.0.1:PORT (requires --token-file)' }),
    'token-file': Flags.string({ description: 'file holding the bearer token for --listen (must not be group/world readable)' }),
    'mount-root': mountRootFlag,
    'data-dir': Flags.string({ description: 'evidence of API pairs and sessions (default $XDG_STATE_HOME/roboguide-eval/serve)' }),
    registry: Flags.string({ description: 'host capacity registry (default $XDG_STATE_HOME/roboguide-eval/registry.db)' }),
    'bind-address': Flags.string({ description: 'host address that published ports bind to', default: '127.0.0.1' }),
    'reap-interval': Flags.integer({ description: 'seconds between reaper passes over expired sessions', default: 5, min: 1 }),
    'stop-budget': Flags.integer({ description: 'seconds between SIGTERM and kill when a session is deleted', default: 10, min: 1 }),
    ...executorFlags,
  };

  async run(): Promise<void> {
    const { flags } = await this.parse(Serve);
    const executor = executorFromFlags(flags);
    const listen = await parseListen(flags.listen, flags['token-file']);
    const mountRoots = await mountRootsFrom(flags['mount-root']);
    const logger = createStderrLogger();
    const running = await startServe({
      ...(flags.socket !== undefined ? { socketPath: flags.socket } : {}),
      ...(listen ? { listen } : {}),
      ...(flags['data-dir'] !== undefined ? { dataDir: flags['data-dir'] } : {}),
      ...(mountRoots !== undefined ? { mountRoots } : {}),
      // The token file's folder is ours: no session mount or pair cwd may reach it.
      ...(flags['token-file'] !== undefined ? { ownedDirs: [dirname(resolve(flags['token-file']))] } : {}),
      ...(flags.registry !== undefined ? { registryPath: flags.registry } : {}),
      bindAddress: flags['bind-address'],
      reapIntervalMs: flags['reap-interval'] * 1000,
      stopBudgetSec: flags['stop-budget'],
      environment: process.env,
      version: await codeVersion(),
      logger,
      // Pairs run where --executor says; sessions (exec) stay on this host's engine (a swarm has no exec API).
      ...(executor.kind === 'swarm' ? { pairRuntime: createExecutorRuntime(executor) } : {}),
    });
    const { adopted, reaped, released } = running.adoption;
    // One machine-readable line on stdout: clients and tests wait for it.
    this.log(JSON.stringify({ listening: running.socketPath, tcp_port: running.tcpPort, data_dir: running.dataDir, adopted, reaped, released_slots: released }));
    await new Promise<void>((resolve) => {
      let received: NodeJS.Signals | null = null;
      const onSignal = (signal: NodeJS.Signals): void => {
        if (received !== null) {
          process.stderr.write(`${signal} again: exiting now; sessions left are reaped by the next server start\n`);
          process.exit(1);
        }
        received = signal;
        process.stderr.write(`${signal}: deleting every session (verified) and stopping running pairs…\n`);
        running
          .shutdown()
          .catch((err: unknown) => process.stderr.write(`shutdown failed: ${(err as Error).message}\n`))
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

async function parseListen(listen: string | undefined, tokenFile: string | undefined): Promise<{ host: string; port: number; token: string } | undefined> {
  if (listen === undefined) {
    if (tokenFile !== undefined) throw new InvalidInputError('E_USAGE', 'invalid flags', [{ path: '--token-file', rule: 'only makes sense with --listen' }]);
    return undefined;
  }
  const m = /^(127\.0\.0\.1|localhost|\[::1\]):(\d{1,5})$/.exec(listen);
  const port = Number(m?.[2]);
  if (m === null || port < 0 || port > 65_535) {
    throw new InvalidInputError('E_USAGE', 'invalid flags', [{ path: '--listen', rule: 'must be 127.0.0.1:PORT (loopback only)' }]);
  }
  if (tokenFile === undefined) throw new InvalidInputError('E_USAGE', 'invalid flags', [{ path: '--token-file', rule: 'is required with --listen' }]);
  let token: string;
  try {
    const info = await stat(tokenFile);
    if ((info.mode & 0o077) !== 0) throw new InvalidInputError('E_USAGE', 'invalid flags', [{ path: '--token-file', rule: 'must not be readable by group or others (chmod 600)' }]);
    token = (await readFile(tokenFile, 'utf8')).trim();
  } catch (err) {
    if (err instanceof InvalidInputError) throw err;
    throw new InvalidInputError('E_USAGE', 'invalid flags', [{ path: '--token-file', rule: `cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})` }]);
  }
  if (token.length < 16) throw new InvalidInputError('E_USAGE', 'invalid flags', [{ path: '--token-file', rule: 'must hold a token of at least 16 characters' }]);
  const host = m[1] === '[::1]' ? '::1' : m[1] === 'localhost' ? '127.0.0.1' : '127.0.0.1';
  return { host, port, token };
}
