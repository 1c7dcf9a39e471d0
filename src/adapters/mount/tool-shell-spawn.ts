import { spawn, type ChildProcessByStdio } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';

/**
 * How the tool shell (tool-shell.ts) is started, and the one `pair run` starts early: bin/run.js spawns it before it
 * loads the command (issue 39). A fork copies the page tables of the process that forks, so it costs with the
 * process's size: about 5 ms at Node's start, 10 to 13 ms once a `pair run` has loaded what it needs (both measured
 * on the 2-core machine), and spawn waits for it on the main thread. The early shell is handed over through a
 * well-known symbol, whichever copy of this module takes it (bin/run.js loads the bundle's entry, which the command's
 * chunk shares; the library's dist/ holds another); nothing is asked of it before then.
 */

/** The shell's script: one request a line (tool-shell.ts says the protocol). */
const SCRIPT = [
  'set -f',
  // fd 3: this shell's standard output, where a captured program's own output goes.
  'exec 3>&1',
  'while IFS= read -r line; do',
  '  set -- $line',
  '  id=$1; mode=$2; shift 2',
  '  if [ "$mode" = r ]; then',
  '    err=$("$@" 2>&1 >/dev/null </dev/null 3>&-)',
  '    rc=$?',
  '    if [ "$rc" -eq 0 ]; then echo "$id 0"; else printf \'%s %s %s\\n\' "$id" "$rc" "$(printf \'%s\' "$err" | tr \'\\r\\n\' \'  \')"; fi',
  '  else',
  '    err=$("$@" 2>&1 1>&3 3>&- </dev/null)',
  '    rc=$?',
  "    [ -z \"$err\" ] || err=$(printf '%s' \"$err\" | tr '\\r\\n' '  ')",
  '    printf \'\\n%s %s %s %s\\n\' "$mode" "$id" "$rc" "$err"',
  '  fi',
  'done',
].join('\n');

/** The tools' whole environment, in the shell and without it: C messages, the system folders, nothing of the caller's. */
export const TOOL_ENV: Readonly<Record<string, string>> = {
  LC_ALL: 'C',
  PATH: '/usr/sbin:/usr/bin:/sbin:/bin',
};

type Shell = ChildProcessByStdio<Writable, Readable, null>;

const PRESPAWNED = Symbol.for('roboguide-eval.tool-shell');

interface Prespawned {
  readonly shellPath: string;
  readonly shell: Shell;
  readonly ignore: () => void;
}

/** A new tool shell: the fixed environment, its own process group (a timed-out request ends it and what it runs). */
export function spawnToolShell(shellPath: string): Shell {
  return spawn(shellPath, ['-c', SCRIPT], {
    stdio: ['pipe', 'pipe', 'ignore'],
    env: TOOL_ENV,
    detached: true,
  });
}

/**
 * Starts the tool shell now, for the process's first tool request to take (takePrespawnedToolShell). Until then it
 * keeps nothing alive and its errors are nobody's (a shell that died is not taken); never throws.
 */
export function prespawnToolShell(shellPath = '/bin/sh'): void {
  const slot = globalThis as { [PRESPAWNED]?: Prespawned };
  if (slot[PRESPAWNED] !== undefined) return;
  const ignore = (): void => undefined;
  let shell: Shell;
  try {
    shell = spawnToolShell(shellPath);
  } catch {
    return;
  }
  shell.on('error', ignore);
  if (shell.stdin == null || shell.stdout == null) return;
  shell.stdin.on('error', ignore);
  shell.unref();
  unrefStream(shell.stdin);
  unrefStream(shell.stdout);
  slot[PRESPAWNED] = { shellPath, shell, ignore };
}

/** The shell prespawnToolShell started for `shellPath`, once, while it still runs; null otherwise. */
export function takePrespawnedToolShell(shellPath: string): Shell | null {
  const slot = globalThis as { [PRESPAWNED]?: Prespawned };
  const early = slot[PRESPAWNED];
  if (early === undefined || early.shellPath !== shellPath) return null;
  delete slot[PRESPAWNED];
  const { shell, ignore } = early;
  // One that died is left with its listeners (whatever it still emits is nobody's) and not taken.
  if (shell.exitCode !== null || shell.signalCode !== null || shell.stdin.destroyed) {
    shell.kill('SIGKILL');
    return null;
  }
  shell.off('error', ignore);
  shell.stdin.off('error', ignore);
  return shell;
}

/** A pipe that never keeps this process alive. */
export function unrefStream(stream: Readable | Writable): void {
  (stream as unknown as { unref?: () => void }).unref?.();
}
