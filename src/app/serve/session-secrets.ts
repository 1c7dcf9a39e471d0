import { holdRedaction } from '../../core/redaction/compile.js';
import type { Clock } from '../ports/clock.js';
import type { Session } from './session-state.js';

/**
 * A session's secrets are masked in everything of it (its execs' argv and output, its files, its log lines), by one
 * machine of every form of every secret, compiled once per set. Compiled at once on the event loop, a secret of 4 KB
 * held every other client about 0.6 s, and every change of the set compiled it all again (issue 39). So a session's set
 * changes only here: the new set's machine is compiled a step at a time (a turn of the loop between steps) and held,
 * and only then does the session's set show it; the old set's machine is let go. Changes of one session run one after
 * another (two execs adding secrets at once keep both). Every redaction of the session's set is then a cache hit.
 */
export async function holdSessionSecrets(session: Session, clock: Pick<Clock, 'nextTurn'>): Promise<void> {
  await changeSessionSecrets(session, clock, () => session.secrets);
}

/**
 * Adds `fresh` to the session's secrets once their machine is held. `problem` (null: none) is asked with the set as it
 * is when this change's turn comes, so concurrent additions are judged together (a cap cannot be passed twice).
 */
export async function addSessionSecrets(
  session: Session,
  fresh: readonly string[],
  clock: Pick<Clock, 'nextTurn'>,
  problem: (held: readonly string[]) => Error | null = () => null,
): Promise<void> {
  await changeSessionSecrets(session, clock, (held) => {
    const refused = problem(held);
    if (refused !== null) throw refused;
    const added = fresh.filter((secret, i) => !held.includes(secret) && fresh.indexOf(secret) === i);
    return added.length === 0 ? null : [...held, ...added];
  });
}

/** Lets the session's machine go (the session left the server's memory). */
export function releaseSessionSecrets(session: Session): void {
  const { release } = session.secretsHeld;
  session.secretsHeld.release = null;
  session.secretsHeld.closed = true;
  release?.();
}

/** `next(held)`: the set to hold, or null when nothing changes. */
async function changeSessionSecrets(
  session: Session,
  clock: Pick<Clock, 'nextTurn'>,
  next: (held: readonly string[]) => readonly string[] | null,
): Promise<void> {
  const held = session.secretsHeld;
  const change = held.turn.then(async () => {
    const set = next([...session.secrets]);
    if (set === null || (set === session.secrets && held.release !== null)) return;
    const release = await holdRedaction(set, clock.nextTurn);
    // The array itself is shared (copies taken of it stay what they were): changed in place.
    if (set !== session.secrets) session.secrets.splice(0, session.secrets.length, ...set);
    // A change that ends after the session left holds nothing (its hold would never be let go).
    if (held.closed) {
      release();
      return;
    }
    const previous = held.release;
    held.release = release;
    previous?.();
  });
  held.turn = change.catch(() => undefined);
  await change;
}
