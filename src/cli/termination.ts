/**
 * SIGINT/SIGTERM while a command works in the foreground (a backend adapter cancelling `pair run`, a person pressing
 * Ctrl-C): the first signal aborts `signal` (the use-case then stops its work in a controlled way and writes its
 * evidence) and prints `announce`; a second one aborts `killNow` (the use-case cuts the stop budget short) and prints
 * `announceKill`; later ones are ignored (the evidence is still being written). Once the command has printed that
 * evidence, `reraise()` exits by the signal that interrupted it, as a shell expects.
 */
export interface Termination {
  readonly signal: AbortSignal;
  /** Aborted by a second signal: stop waiting, kill now. */
  readonly killNow: AbortSignal;
  /** Stop listening (the signals get their default action again). */
  dispose(): void;
  /** After the evidence is written and printed: exit by the signal received, if any. */
  reraise(): void;
}

export function trapTermination(
  announce: (signal: NodeJS.Signals) => string,
  announceKill?: (signal: NodeJS.Signals) => string,
): Termination {
  const terminate = new AbortController();
  const killNow = new AbortController();
  let received: NodeJS.Signals | null = null;
  let count = 0;
  const onSignal = (signal: NodeJS.Signals): void => {
    count += 1;
    if (count === 1) process.stderr.write(announce(signal));
    if (count === 2 && announceKill !== undefined) process.stderr.write(announceKill(signal));
    received ??= signal;
    terminate.abort();
    if (count >= 2) killNow.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  return {
    signal: terminate.signal,
    killNow: killNow.signal,
    dispose: () => {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    },
    reraise: () => {
      const signal = received;
      if (signal !== null) setImmediate(() => process.kill(process.pid, signal));
    },
  };
}
