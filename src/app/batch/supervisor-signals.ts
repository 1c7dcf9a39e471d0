import { isStopRequest } from './layout.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import type { Clock } from '../ports/clock.js';
import { STOP_FILE } from '../../core/evidence-names.js';
import type { SupervisorLoop } from './supervisor-loop.js';

/** How often the stop file is read besides SIGUSR2 (a lost signal must not lose a stop). */
const STOP_POLL_MS = 1_000;

/**
 * SIGUSR2 (whose default action would kill us) latched from start-up until the stop protocol's handler is in
 * place: a stop sent meanwhile is read once the handler is. `off()` removes the latch (also on a failed start).
 */
export class StopLatch {
  #latched = false;
  readonly #listener = (): void => {
    this.#latched = true;
  };

  constructor() {
    process.on('SIGUSR2', this.#listener);
  }

  get latched(): boolean {
    return this.#latched;
  }

  off(): void {
    process.off('SIGUSR2', this.#listener);
  }
}

/**
 * The stop protocol, in place until the returned function is called: SIGUSR2 and a poll read the stop file
 * (`e1-batch stop`); with `handleSignals`, SIGTERM/SIGINT stop, a second one terminates, a third kills now. Each becomes an event of
 * the loop. Takes over from the latch.
 */
export function listenForStops(
  deps: { readonly store: EvidenceStore; readonly handleSignals: boolean; readonly clock: Clock },
  loop: SupervisorLoop,
  latch: StopLatch,
): () => void {
  const onSignal = (): void => {
    loop.feed({ type: 'signal' }).catch(() => undefined);
  };
  const onUsr2 = (): void => {
    deps.store
      .readJson(STOP_FILE, isStopRequest)
      .then((request) =>
        request ? loop.feed({ type: 'stop_requested', terminate: request.terminate }) : undefined,
      )
      .catch(() => undefined);
  };
  // SIGUSR2 is the stop protocol (`e1-batch stop`): always ours while supervising, even in-process.
  process.on('SIGUSR2', onUsr2);
  latch.off();
  if (latch.latched) onUsr2();
  if (deps.handleSignals) {
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  }
  const stopPoll = deps.clock.setInterval(STOP_POLL_MS, onUsr2);
  return () => {
    stopPoll.cancel();
    process.off('SIGUSR2', onUsr2);
    if (deps.handleSignals) {
      process.off('SIGTERM', onSignal);
      process.off('SIGINT', onSignal);
    }
  };
}
