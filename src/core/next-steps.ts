import { isObject, own } from './json-object.js';
import type { PauseReason } from './pause-rules.js';

/**
 * Why a pair or a batch ended or stopped, in the user's words, and the command to run next (issue 40). Pure: the
 * callers (status, `pair run`, the report, `stop`) hand in what they know and print the lines as they are.
 */

/** A path or word as a shell reads it back: as typed when it needs no quoting, else single-quoted. */
export function shellWord(text: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(text) ? text : `'${text.replace(/'/g, `'\\''`)}'`;
}

/** How hints name the tool and the batch folder: as the user typed them. */
export interface HintContext {
  readonly bin: string;
  /** The batch's output folder as typed on the command line (never made absolute or relative by us). */
  readonly output: string;
}

function command(ctx: HintContext, verb: string): string {
  return `${ctx.bin} e1-batch ${verb} --output ${shellWord(ctx.output)}`;
}

/** What a finished pair's result says, as far as the words need it. */
export interface ResultFacts {
  readonly reasons: readonly string[];
  /** The parsed outcome (masked), when there was one. */
  readonly outcome: unknown;
  readonly exit_code: number | null;
  /** The last lines of the pair's stderr.log (already masked on disk), when read. */
  readonly stderr_tail?: readonly string[];
  /** Where the pair's stderr.log is, when known. */
  readonly stderr_path?: string;
}

/** A result's container exit code, read defensively (results from before a field, test records): null when absent. */
export function exitCodeOf(result: { readonly container?: unknown }): number | null {
  const container = result.container;
  if (!isObject(container)) return null;
  const code = own(container, 'exit_code');
  return typeof code === 'number' ? code : null;
}

function incidents(outcome: unknown): { status: number | null; requiresStop: boolean }[] {
  if (!isObject(outcome)) return [];
  const attempt = own(outcome, 'e1_attempt');
  const list = isObject(attempt) ? own(attempt, 'provider_incidents') : undefined;
  if (!Array.isArray(list)) return [];
  return list.filter(isObject).map((incident) => {
    const status = own(incident, 'http_status');
    return {
      status: typeof status === 'number' && Number.isInteger(status) ? status : null,
      requiresStop: own(incident, 'requires_stop') === true,
    };
  });
}

/**
 * `setting`: where the allowed statuses live for this run (`provider.allowed_http_statuses` in a manifest,
 * `allowed_http_statuses` in a `pair run` spec).
 */
export function explainResult(r: ResultFacts, setting = 'provider.allowed_http_statuses'): string[] {
  const lines: string[] = [];
  const has = (reason: string) => r.reasons.includes(reason);
  const seen = incidents(r.outcome);
  if (has('provider_status_not_allowed')) {
    const statuses = [...new Set(seen.map((i) => i.status).filter((s): s is number => s !== null))];
    const list = statuses.map((s) => `HTTP ${s}`).join(', ');
    lines.push(
      `the driver reported ${list || 'an HTTP status'} from the provider (e1_attempt.provider_incidents), which is not in ${setting} (empty by default: any status stops)`,
      `if the driver recovers from ${statuses.length === 1 ? 'it' : 'them'}, list ${statuses.length === 1 ? 'it' : 'them'} there: "${setting}": [${statuses.join(', ')}]`,
    );
  }
  if (has('provider_requires_stop'))
    lines.push(
      'the driver said the provider requires a stop (requires_stop: true in e1_attempt.provider_incidents)',
    );
  // Stopped by us (its deadline, a limit, an operator): the exit code is our kill's, not a crash of the agent.
  const stoppedByUs = [
    'timeout',
    'oom_killed',
    'terminated',
    'log_limit_exceeded',
    'disk_limit_exceeded',
  ].some(has);
  if (has('outcome_missing') && !stoppedByUs && r.exit_code !== null && r.exit_code !== 0) {
    lines.push(
      `the agent exited with code ${r.exit_code} without writing its outcome: it crashed or gave up (its own failure; the harness ran and archived it as it should)`,
    );
  } else if (has('outcome_missing') && !stoppedByUs && r.exit_code === 0) {
    lines.push('the agent exited with code 0 but wrote no outcome file at ROBOGUIDE_OUTCOME_PATH');
  }
  if (has('outcome_missing') || has('outcome_unparseable')) {
    const tail = r.stderr_tail ?? [];
    if (tail.length > 0) lines.push('last lines of its stderr:', ...tail.map((l) => `  | ${l}`));
    if (r.stderr_path !== undefined) lines.push(`its whole stderr: ${r.stderr_path}`);
  }
  return lines;
}

/** What a batch's state needs to be explained. */
export interface BatchFacts {
  readonly state: string;
  readonly pause_reasons: readonly string[];
  readonly supervisor: { readonly pid: number; readonly alive: boolean } | null;
  /** Jobs without a result. */
  readonly unfinished: number;
}

const PAUSE_WORDS: Readonly<Record<PauseReason, string>> = {
  fatal: 'a pair reported a fatal failure (or broke a rule that stops the batch): nothing more is dispatched',
  infrastructure_streak: 'three pairs in a row failed as infrastructure_failure (see the failed pairs above)',
  provider: `a pair stopped for its provider (see the failed pair's reason above: the HTTP status and the setting)`,
  harness:
    'the harness could not do its part for a pair (evidence, cleanup or reconciliation: see the pause cause)',
  registry_unavailable: 'the capacity registry did not answer',
  image_registry_unavailable:
    'the image registry did not answer while an image was pulled (its message is in the journal): resume pulls again',
  inputs_changed: 'a source file pinned by source_sha256 changed while the batch ran',
};

/** Pauses that `resume` clears (docs/spec.md 8.4); the others need `continuation`. */
const RESUMABLE: ReadonlySet<string> = new Set([
  'infrastructure_streak',
  'harness',
  'provider',
  'registry_unavailable',
  'image_registry_unavailable',
]);

/** The why and next lines of a batch that is not running: paused, stopped, orphaned, drained. */
export function batchNextSteps(b: BatchFacts, ctx: HintContext): string[] {
  const orphaned = b.supervisor !== null && !b.supervisor.alive && b.unfinished > 0;
  if (b.state === 'running' || b.state === 'stopping') {
    if (!orphaned || b.supervisor === null) return [];
    return [
      `why: the supervisor (pid ${b.supervisor.pid}) is not running and recorded no exit: it was killed or the host restarted`,
      `next: ${command(ctx, 'resume')}   (recovers the pairs it left and goes on)`,
    ];
  }
  if (b.state === 'drained') return [`next: ${command(ctx, 'report')}   (every job has a result)`];
  if (b.state === 'stopped')
    return [
      'why: stopped by `e1-batch stop` (or a signal to its supervisor); pairs without a result were not run',
      `next: ${command(ctx, 'resume')}   (to go on)`,
    ];
  if (b.state !== 'paused') return [];
  const lines: string[] = [];
  for (const reason of b.pause_reasons)
    lines.push(`why (${reason}): ${PAUSE_WORDS[reason as PauseReason] ?? reason}`);
  if (b.pause_reasons.length === 0 && b.supervisor !== null && !b.supervisor.alive)
    lines.push(
      `why: the supervisor (pid ${b.supervisor.pid}) is not running and recorded no pause reason: it was killed or the host restarted`,
    );
  if (b.pause_reasons.some((r) => !RESUMABLE.has(r))) {
    lines.push(
      `next: ${ctx.bin} e1-batch continuation --output ${shellWord(ctx.output)} --manifest-out NEW.json   (a new manifest of the jobs not yet claimed; resume keeps this pause)`,
    );
  } else {
    lines.push(`next: fix what the reason names, then ${command(ctx, 'resume')}`);
  }
  return lines;
}

/**
 * The last `count` non-empty lines of a log's tail bytes, each cut to 200 characters (the first, partial line of the
 * tail is dropped unless the tail is the whole file). The bytes are already masked on disk; the caller makes them
 * inert for a terminal where it prints them.
 */
export function lastLines(tail: Uint8Array, wholeFile: boolean, count = 6): string[] {
  const text = new TextDecoder('utf-8', { fatal: false }).decode(tail);
  const lines = text.split(/\r?\n/);
  if (!wholeFile) lines.shift();
  return lines
    .filter((l) => l.trim() !== '')
    .slice(-count)
    .map((l) => (l.length > 200 ? `${l.slice(0, 200)}…` : l));
}
