/**
 * What a lost engine connection meant for a pair (issue 10, SPEC §5). Pure: the lifecycle reports when it last saw
 * the container alive and what a fresh `inspect` says once the engine answers again; this decides whether the pair
 * goes on waiting, ended on its own, or ended because of the engine.
 */

/** Result reasons for a pair whose engine went away (all classified `infrastructure_failure`). */
export type EngineLoss =
  /** The engine went away and, when it answered again, the container had been stopped (or was never started). */
  | 'engine_restarted'
  /** When the engine answered again it no longer knew the container (inspect: 404). */
  | 'container_vanished'
  /** The engine never answered again before the pair's deadline. */
  | 'engine_unreachable'
  /** Swarm: the node that ran the pair was lost (its engine killed, or the node marked down); never re-run. */
  | 'node_lost';

/** The part of a fresh inspect this decision reads; null when the engine says the container does not exist. */
export interface ReturnedContainer {
  readonly status: 'created' | 'running' | 'paused' | 'restarting' | 'removing' | 'exited' | 'dead';
  readonly exitCode: number | null;
  readonly finishedAt: string | null;
}

export type EngineReturnVerdict =
  /** The container survived (a dropped connection, or a live-restore engine): reconnect and wait again. */
  | { readonly kind: 'still_running' }
  /** It exited before we lost sight of it: an ordinary exit whose report the dropped connection swallowed. */
  | { readonly kind: 'exited_before_loss'; readonly exitCode: number | null }
  | {
      readonly kind: 'lost';
      readonly loss: Exclude<EngineLoss, 'engine_unreachable' | 'node_lost'>;
      readonly exitCode: number | null;
    };

/**
 * Clocks of the engine and of this process may differ a little: an exit counts as "before we lost sight of the
 * container" only when it is clearly earlier than the last moment the engine showed it alive.
 */
export const CLOCK_SLACK_MS = 2_000;

/**
 * `lastSeenAliveMs`: the last moment (epoch ms, our clock) the engine answered while the container existed and had
 * not exited. A container found `exited`/`dead` after that moment did not survive the engine's absence: without
 * live-restore a restarting dockerd stops every running container, and a `created` one was never started.
 */
export function judgeEngineReturn(
  container: ReturnedContainer | null,
  lastSeenAliveMs: number,
): EngineReturnVerdict {
  if (container === null) return { kind: 'lost', loss: 'container_vanished', exitCode: null };
  switch (container.status) {
    case 'running':
    case 'paused':
    case 'restarting':
      return { kind: 'still_running' };
    case 'created':
      return { kind: 'lost', loss: 'engine_restarted', exitCode: null };
    case 'removing':
      return { kind: 'lost', loss: 'container_vanished', exitCode: null };
    case 'exited':
    case 'dead': {
      const finishedMs = container.finishedAt === null ? Number.NaN : Date.parse(container.finishedAt);
      if (Number.isFinite(finishedMs) && finishedMs < lastSeenAliveMs - CLOCK_SLACK_MS) {
        return { kind: 'exited_before_loss', exitCode: container.exitCode };
      }
      return { kind: 'lost', loss: 'engine_restarted', exitCode: container.exitCode };
    }
  }
}

/**
 * A container a resume found stopped, which no supervisor watched stop (issue 10 cell d). The engine's event buffer
 * is a hint: a restarted dockerd starts with an empty one and, without live-restore, stops the containers it finds
 * running (`kill`, `die`). So a container stopped before its deadline whose `kill` and `die` the engine remembers
 * but whose `start` (since the claim) it does not — in a history that did not overflow since then — was stopped by
 * an engine that restarted after the container started. Anything less conclusive (an overflowing buffer, a
 * remembered start, no kill) is not called a restart.
 */
export function judgeUnwatchedStop(input: {
  readonly container: ReturnedContainer;
  readonly deadlineMs: number;
  readonly eventActions: readonly string[];
  /** The engine's history since the claim is whole (its buffer did not overflow): a missing `start` means something. */
  readonly historyComplete: boolean;
}): 'engine_restarted' | null {
  const { container, eventActions } = input;
  if (!input.historyComplete) return null;
  if (container.status !== 'exited' && container.status !== 'dead') return null;
  const finishedMs = container.finishedAt === null ? Number.NaN : Date.parse(container.finishedAt);
  if (!Number.isFinite(finishedMs) || finishedMs >= input.deadlineMs) return null;
  const seen = new Set(eventActions);
  return seen.has('kill') && seen.has('die') && !seen.has('start') ? 'engine_restarted' : null;
}

/** Backoff between probes of an engine that does not answer: 250 ms doubling to 2 s. */
export function engineProbeDelayMs(attempt: number): number {
  return Math.min(2_000, 250 * 2 ** Math.max(0, Math.min(attempt, 4)));
}

/** The words kept in result.json's `engine_error.message` for a lost engine (no engine text, no secrets). */
export function describeEngineLoss(input: {
  readonly loss: EngineLoss;
  readonly lostAt: string;
  readonly answeredAt: string | null;
  readonly finishedAt: string | null;
  readonly exitCode: number | null;
}): string {
  const lost = `the engine connection was lost at ${input.lostAt}`;
  switch (input.loss) {
    case 'engine_unreachable':
      return `${lost}; the engine did not answer again before the pair's deadline`;
    case 'node_lost':
      return `the node that ran the pair was lost at ${input.lostAt}; the pair is not run again`;
    case 'container_vanished':
      return `${lost}; when the engine answered again (${input.answeredAt ?? '?'}) the container no longer existed`;
    case 'engine_restarted':
      return input.finishedAt === null
        ? `${lost}; when the engine answered again (${input.answeredAt ?? '?'}) the container had never started`
        : `${lost}; when the engine answered again (${input.answeredAt ?? '?'}) the container had been stopped at ${input.finishedAt} (exit code ${input.exitCode ?? '?'})`;
  }
}

/** The `engine_error.message` of a stop found by a resume (see judgeUnwatchedStop). */
export function describeUnwatchedStop(finishedAt: string | null, exitCode: number | null): string {
  return `while no supervisor watched it, the container was stopped at ${finishedAt ?? '?'} (exit code ${exitCode ?? '?'}) by an engine restarted after it started (the engine's event history begins after the start)`;
}
