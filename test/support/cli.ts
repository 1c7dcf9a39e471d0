import { spawn } from 'node:child_process';
import { resolve } from 'node:path';

/** The CLI under test: the built entry point (the integration global setup rebuilds dist/ when src/ is newer). */
export const BIN = resolve(import.meta.dirname, '../../bin/run.js');

export interface CliOutput {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

export interface CliOptions {
  /**
   * Added to this process's environment; a variable given as `undefined` is removed. The crash-test variables
   * (ROBOGUIDE_FAILPOINT, ROBOGUIDE_FAILPOINT_TRACE) are removed unless given here.
   */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** Runs the CLI under this command, e.g. `['nsenter', '--net=/run/netns/x']`. */
  readonly prefix?: readonly string[];
  /** SIGKILLs the CLI after this long (the result then has `signal: 'SIGKILL'`); default: no limit. */
  readonly timeoutMs?: number;
  /** Node's own options, before the script (e.g. `['--import', hook]`). */
  readonly nodeArgs?: readonly string[];
}

/**
 * Runs `node bin/run.js ARGS` in a child process (stdin closed) and resolves with its exit code, signal and whole
 * output once it has exited. Never rejects on a non-zero exit: tests assert the code.
 */
export function cli(args: readonly string[], options: CliOptions = {}): Promise<CliOutput> {
  return node([...(options.nodeArgs ?? []), '--disable-warning=ExperimentalWarning', BIN, ...args], options);
}

/** Runs this Node (`process.execPath`) with `argv`, as `cli` runs the CLI (the same options, `nodeArgs` aside). */
export function node(
  argv: readonly string[],
  options: Omit<CliOptions, 'nodeArgs'> = {},
): Promise<CliOutput> {
  const env: Record<string, string | undefined> = {
    ...process.env,
    ROBOGUIDE_FAILPOINT: undefined,
    ROBOGUIDE_FAILPOINT_TRACE: undefined,
    ...options.env,
  };
  for (const [name, value] of Object.entries(env)) if (value === undefined) delete env[name];
  const [file, ...rest] = [...(options.prefix ?? []), process.execPath, ...argv] as [string, ...string[]];
  const child = spawn(file, rest, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
  const limit =
    options.timeoutMs === undefined ? undefined : setTimeout(() => child.kill('SIGKILL'), options.timeoutMs);
  return new Promise((resolvePromise, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(limit);
      resolvePromise({ code, signal, stdout, stderr });
    });
  });
}
