/**
 * SIGINT/SIGTERM while a command works in the foreground (a backend adapter cancelling `pair run`): the first signal
 * aborts `signal` (the use-case then stops its work in a controlled way and writes its evidence); once the command
 * has printed that evidence, `reraise()` exits by the signal that interrupted it, as a shell expects.
 */
export interface Termination {
  readonly signal: AbortSignal;
  /** Stop listening (the signals get their default action again). */
  dispose(): void;
  /** After the evidence is written and printed: exit by the signal received, if any. */
  reraise(): void;
}

export function trapTermination(announce: (signal: NodeJS.Signals) => string): Termination {
  const terminate = new AbortController();
  let received: NodeJS.Signals | null = null;
  const onSignal = (signal: NodeJS.Signals): void => {
    if (received === null) process.stderr.write(announce(signal));
    received = signal;
    terminate.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  return {
    signal: terminate.signal,
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
