import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';

/** The unprivileged local user of docs/secrets.md "Local users" (nobody): never a user the tests create. */
export const HOSTILE_UID = 65534;

/**
 * A process of `HOSTILE_UID` swapping two names again and again with renameat2(RENAME_EXCHANGE) (python3 ctypes,
 * x86-64 syscall 316), until killed; it prints how many swaps succeeded when it receives SIGTERM.
 */
const SCRIPT = `
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = sys.argv[1].encode(), sys.argv[2].encode()
n = 0
def stop(*_):
    print(n, flush=True)
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
print('ready', flush=True)
while True:
    if libc.syscall(316, -100, a, -100, b, 2) == 0:
        n += 1
`;

export interface ExchangeAdversary {
  /** Stops it; the number of swaps it made. */
  stop(): Promise<number>;
}

export async function startExchangeAdversary(a: string, b: string): Promise<ExchangeAdversary> {
  const child: ChildProcess = spawn('python3', ['-c', SCRIPT, a, b], {
    uid: HOSTILE_UID,
    gid: HOSTILE_UID,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout?.on('data', (chunk: Buffer) => (out += chunk.toString()));
  while (!out.includes('ready\n')) {
    if (child.exitCode !== null) throw new Error(`adversary exited ${child.exitCode}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return {
    stop: async () => {
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      await exited;
      return Number(out.split('\n')[1]);
    },
  };
}

/** Runs `args` as HOSTILE_UID; its exit code. */
export async function runAsHostile(command: string, args: readonly string[]): Promise<number> {
  const child = spawn(command, args, { uid: HOSTILE_UID, gid: HOSTILE_UID, stdio: 'ignore' });
  const [code] = (await once(child, 'exit')) as [number | null];
  return code ?? -1;
}
