import { PROVIDER_FAILURE_SCHEMA } from './result.js';
import type { ProviderFailure, ProviderFailureKind } from './result.js';
import { isObject, own, type JsonObject } from './json-object.js';

/**
 * Provider-failure diagnosis over Codex session ("rollout") tails (SPEC §6).
 *
 * Pure: takes the tails an adapter already read and returns a hint for operators, never a
 * verdict. It validates every shape before use, never throws, and never copies a message,
 * free text, path or unknown field into its output: the output is built only from the
 * constants below and an integer status.
 */

/** At most this many session files are considered (the newest by mtime). */
export const MAX_SESSION_FILES = 32;
/** At most this many bytes are read from the end of each session file. */
export const MAX_TAIL_BYTES = 2 * 1024 * 1024;

export interface SessionTail {
  /** File modification time; orders tails across files (newer wins). */
  readonly mtimeMs: number;
  /** The decoded tail of the file (at most MAX_TAIL_BYTES bytes of it). */
  readonly text: string;
  /** The read started mid-file: the first line may be truncated and is dropped. */
  readonly partial: boolean;
}

/**
 * Both spellings of every allowlisted `codex_error_info` variant, mapped to the contract kind.
 * Only provider-side failures are listed (the provider refused, failed or dropped the request);
 * `other`, `context_window_exceeded`, `unauthorized`, `bad_request`, sandbox and policy variants
 * describe the request or the agent, not the provider, and stay unknown (docs/diagnosis.md).
 */
const KNOWN_VARIANTS: ReadonlyMap<string, ProviderFailureKind> = new Map<string, ProviderFailureKind>([
  ['response_too_many_failed_attempts', 'response_too_many_failed_attempts'],
  ['responseTooManyFailedAttempts', 'response_too_many_failed_attempts'],
  ['http_connection_failed', 'http_connection_failed'],
  ['httpConnectionFailed', 'http_connection_failed'],
  ['response_stream_connection_failed', 'response_stream_connection_failed'],
  ['responseStreamConnectionFailed', 'response_stream_connection_failed'],
  ['response_stream_disconnected', 'response_stream_disconnected'],
  ['responseStreamDisconnected', 'response_stream_disconnected'],
  ['usage_limit_exceeded', 'usage_limit_exceeded'],
  ['usageLimitExceeded', 'usage_limit_exceeded'],
  ['rate_limit_exceeded', 'rate_limit_exceeded'],
  ['rateLimitExceeded', 'rate_limit_exceeded'],
  ['server_overloaded', 'server_overloaded'],
  ['serverOverloaded', 'server_overloaded'],
  ['internal_server_error', 'internal_server_error'],
  ['internalServerError', 'internal_server_error'],
]);

const STATUS_KEYS = ['http_status_code', 'httpStatusCode'] as const;
const ERROR_INFO_KEYS = ['codex_error_info', 'codexErrorInfo'] as const;
const TURN_ID_KEYS = ['turn_id', 'turnId'] as const;

function httpStatus(value: unknown): number | null {
  return typeof value === 'number' && Number.isInteger(value) && value >= 100 && value <= 599 ? value : null;
}

function statusOf(details: unknown): number | null {
  if (!isObject(details)) return null;
  for (const key of STATUS_KEYS) {
    const status = httpStatus(own(details, key));
    if (status !== null) return status;
  }
  return null;
}

function failure(kind: ProviderFailureKind, status: number | null): ProviderFailure {
  return { schema: PROVIDER_FAILURE_SCHEMA, kind, http_status: status };
}

/** Maps `codex_error_info` (bare string or externally tagged `{variant: details}`); unknown → null. */
function mapErrorInfo(info: unknown): ProviderFailure | null {
  if (typeof info === 'string') {
    const kind = KNOWN_VARIANTS.get(info);
    return kind === undefined ? null : failure(kind, null);
  }
  if (!isObject(info)) return null;
  const keys = Object.keys(info);
  const [variant] = keys;
  if (keys.length !== 1 || variant === undefined) return null;
  const kind = KNOWN_VARIANTS.get(variant);
  return kind === undefined ? null : failure(kind, statusOf(own(info, variant)));
}

function errorInfoOf(obj: JsonObject): unknown {
  for (const key of ERROR_INFO_KEYS) {
    if (Object.hasOwn(obj, key)) return obj[key];
  }
  return undefined;
}

function turnIdOf(payload: JsonObject): string | null {
  for (const key of TURN_ID_KEYS) {
    const id = own(payload, key);
    if (typeof id === 'string' && id.length > 0) return id;
  }
  return null;
}

/**
 * One rollout event that matters to the diagnosis. `failure` is null for an error of an unknown
 * (or non-provider) variant: it is still a recorded failure, just not one we name.
 */
type TurnEvent =
  | { readonly kind: 'start'; readonly turnId: string | null }
  | {
      readonly kind: 'end';
      readonly turnId: string | null;
      readonly error: { readonly failure: ProviderFailure | null } | null;
    }
  | { readonly kind: 'error'; readonly turnId: string | null; readonly failure: ProviderFailure | null };

const START_TYPES: ReadonlySet<string> = new Set(['task_started', 'turn_started']);
const END_TYPES: ReadonlySet<string> = new Set(['task_complete', 'turn_complete', 'turn_aborted']);
/** Codex never escapes these names: a line without one of them literally is no turn end. */
const END_MARKERS = [...END_TYPES].map((type) => `"${type}"`);

/** The turn event of one parsed line, or undefined when the line is none (or malformed). */
function turnEventOf(entry: unknown): TurnEvent | undefined {
  if (!isObject(entry) || own(entry, 'type') !== 'event_msg') return undefined;
  const payload = own(entry, 'payload');
  if (!isObject(payload)) return undefined;
  const type = own(payload, 'type');
  if (typeof type !== 'string') return undefined;
  if (START_TYPES.has(type)) return { kind: 'start', turnId: turnIdOf(payload) };
  if (END_TYPES.has(type)) {
    // Since Codex 0.145 a failed turn ends with `error: {message, codex_error_info}`; absent (or null) on success.
    const error = own(payload, 'error');
    return {
      kind: 'end',
      turnId: turnIdOf(payload),
      error: isObject(error) ? { failure: mapErrorInfo(errorInfoOf(error)) } : null,
    };
  }
  if (type === 'error')
    return { kind: 'error', turnId: turnIdOf(payload), failure: mapErrorInfo(errorInfoOf(payload)) };
  return undefined;
}

/** Terminal events nest a few levels deep; deeper lines are hostile or irrelevant, and slow to parse. */
const MAX_NESTING = 32;
const [BACKSLASH, QUOTE, OPEN_BRACE, OPEN_BRACKET, CLOSE_BRACE, CLOSE_BRACKET] = [
  0x5c, 0x22, 0x7b, 0x5b, 0x7d, 0x5d,
];

/** Whether brackets outside strings nest deeper than MAX_NESTING: one linear scan, no allocation. */
function nestsTooDeep(line: string): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < line.length; i += 1) {
    const c = line.charCodeAt(i);
    if (inString) {
      // A backslash escapes the next character; a bare quote ends the string.
      if (c === BACKSLASH) i += 1;
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) {
      inString = true;
    } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      depth += 1;
      if (depth > MAX_NESTING) return true;
    } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
      depth -= 1;
    }
  }
  return false;
}

/**
 * A line as a JSON value, or undefined. Only lines that are objects and mention `"event_msg"`
 * literally (Codex never escapes it) are parsed, so large response items cost one substring search.
 */
function parseLine(line: string): unknown {
  const trimmed = line.trim();
  if (!trimmed.startsWith('{') || !trimmed.includes('"event_msg"') || nestsTooDeep(trimmed)) return undefined;
  try {
    return JSON.parse(trimmed) as unknown;
  } catch {
    // Not JSON (a truncated line, binary noise, nesting too deep): skipped.
    return undefined;
  }
}

/** The usable text of a tail: bounded to MAX_TAIL_BYTES, first line dropped when partial. */
function usableText(tail: SessionTail): string {
  let text = tail.text;
  let partial = tail.partial;
  if (text.length > MAX_TAIL_BYTES) {
    text = text.slice(text.length - MAX_TAIL_BYTES);
    partial = true;
  }
  if (!partial) return text;
  const firstNewline = text.indexOf('\n');
  return firstNewline === -1 ? '' : text.slice(firstNewline + 1);
}

/** The lines of a tail, newest first. */
function* linesNewestFirst(text: string): Generator<string> {
  let end = text.length;
  while (end > 0) {
    const newline = text.lastIndexOf('\n', end - 1);
    yield text.slice(newline + 1, end);
    end = newline === -1 ? 0 : newline;
  }
}

function countLines(text: string): number {
  let count = 0;
  let from = 0;
  for (;;) {
    const newline = text.indexOf('\n', from);
    if (newline === -1) return from < text.length ? count + 1 : count;
    count += 1;
    from = newline + 1;
  }
}

/** Whether two turn ids may be the same turn: equal, or one of them unknown. */
function sameTurn(a: string | null, b: string | null): boolean {
  return a === null || b === null || a === b;
}

interface TailVerdict {
  readonly failure: ProviderFailure | null;
  readonly endFound: boolean;
}

/**
 * What one tail says about its newest turn, scanning lines newest first:
 * - an `error` line newer than every turn end belongs to a turn that never recorded its end (the
 *   process stopped mid-turn); being the newest evidence, it decides;
 * - otherwise the newest turn end decides: its own `error`, else an `error` line of that turn
 *   (same `turn_id`; without ids, one between the turn's start and its end), else no failure;
 * - undefined when the tail holds no turn end and no error line.
 */
function verdictOf(text: string): TailVerdict | undefined {
  let end: { readonly turnId: string | null } | undefined;
  /** An error line without a matching id, waiting for the turn's start to prove it belongs. */
  let candidate: ProviderFailure | null | undefined;
  let crossedOtherTurn = false;
  for (const line of linesNewestFirst(text)) {
    const event = turnEventOf(parseLine(line));
    if (event === undefined) continue;
    if (end === undefined) {
      if (event.kind === 'error') return { failure: event.failure, endFound: false };
      if (event.kind === 'end') {
        if (event.error !== null) return { failure: event.error.failure, endFound: true };
        end = { turnId: event.turnId };
      }
      continue;
    }
    if (event.kind === 'error') {
      if (end.turnId !== null && event.turnId !== null) {
        if (end.turnId === event.turnId) return { failure: event.failure, endFound: true };
      } else if (candidate === undefined && !crossedOtherTurn) {
        candidate = event.failure;
      }
    } else if (event.kind === 'start') {
      if (sameTurn(end.turnId, event.turnId)) return { failure: candidate ?? null, endFound: true };
    } else if (sameTurn(end.turnId, event.turnId)) {
      // An earlier turn's end before this turn's start: the window holds no attributable error.
      return { failure: null, endFound: true };
    } else {
      crossedOtherTurn = true; // interleaved turns: from here on only an error with this turn's id counts
    }
  }
  if (end === undefined) return undefined;
  return { failure: null, endFound: true };
}

/** Whether a tail records any turn end (for the report; only scanned when the verdict did not say). */
function hasTurnEnd(text: string): boolean {
  for (const line of linesNewestFirst(text)) {
    if (!END_MARKERS.some((marker) => line.includes(marker))) continue; // most lines: no parse at all
    if (turnEventOf(parseLine(line))?.kind === 'end') return true;
  }
  return false;
}

function orderKey(mtimeMs: number): number {
  return Number.isFinite(mtimeMs) ? mtimeMs : Number.NEGATIVE_INFINITY;
}

/** Tails newest first; equal mtimes keep input order, the later one counting as newer. */
function newestFirst(tails: readonly SessionTail[]): SessionTail[] {
  const valid = tails.filter((t) => isObject(t) && typeof t.text === 'string');
  const indexed = valid.map((tail, index) => ({ tail, index, key: orderKey(tail.mtimeMs) }));
  indexed.sort((a, b) => b.key - a.key || b.index - a.index);
  return indexed.slice(0, MAX_SESSION_FILES).map((x) => x.tail);
}

/** The diagnosis with what it rests on, so "nothing recorded" and "the last turn succeeded" differ. */
export interface SessionDiagnosis {
  readonly provider_failure: ProviderFailure | null;
  /** Session tails considered (at most MAX_SESSION_FILES). */
  readonly files_read: number;
  /** Lines in the considered tails (a partial tail's dropped first line not counted). */
  readonly lines_read: number;
  /** Whether any considered tail records a turn end (task_complete, turn_complete, turn_aborted). */
  readonly turn_end_found: boolean;
}

/**
 * The provider failure of the newest turn (newest file first; in it, the newest turn that ended,
 * or a failure recorded after it), or null when that turn ended without a failure, with an
 * unknown variant, or when no tail records a turn end or an error at all. Never throws.
 */
export function diagnoseSessionTails(tails: readonly SessionTail[]): SessionDiagnosis {
  if (!Array.isArray(tails))
    return { provider_failure: null, files_read: 0, lines_read: 0, turn_end_found: false };
  const considered = newestFirst(tails).map(usableText);
  let verdict: TailVerdict | undefined;
  let turnEndFound = false;
  let linesRead = 0;
  for (const text of considered) {
    linesRead += countLines(text);
    if (verdict === undefined) {
      verdict = verdictOf(text);
      turnEndFound = verdict?.endFound ?? false;
    } else if (!turnEndFound) {
      turnEndFound = hasTurnEnd(text);
    }
  }
  return {
    provider_failure: verdict?.failure ?? null,
    files_read: considered.length,
    lines_read: linesRead,
    turn_end_found: turnEndFound,
  };
}

/** The provider failure alone (see diagnoseSessionTails). */
export function reduceSessionTails(tails: readonly SessionTail[]): ProviderFailure | null {
  return diagnoseSessionTails(tails).provider_failure;
}
