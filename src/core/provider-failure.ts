import { PROVIDER_FAILURE_SCHEMA } from './result.js';
import type { ProviderFailure, ProviderFailureKind } from './result.js';

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

/** Both spellings of every allowlisted `codex_error_info` variant, mapped to the contract kind. */
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
]);

const STATUS_KEYS = ['http_status_code', 'httpStatusCode'] as const;
const ERROR_INFO_KEYS = ['codex_error_info', 'codexErrorInfo'] as const;

/** A terminal event's meaning: a failure we recognise, or "ended without a known failure". */
type Terminal = { readonly failure: ProviderFailure | null };

type JsonObject = Readonly<Record<string, unknown>>;

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** An own property only: `constructor`, `__proto__`, `toString` never resolve through the prototype. */
function own(obj: JsonObject, key: string): unknown {
  return Object.hasOwn(obj, key) ? obj[key] : undefined;
}

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

function errorInfoOf(payload: JsonObject): unknown {
  for (const key of ERROR_INFO_KEYS) {
    if (Object.hasOwn(payload, key)) return payload[key];
  }
  return undefined;
}

/** The terminal meaning of one parsed line, or undefined when the line is not a terminal event. */
function terminalOf(entry: unknown): Terminal | undefined {
  if (!isObject(entry) || own(entry, 'type') !== 'event_msg') return undefined;
  const payload = own(entry, 'payload');
  if (!isObject(payload)) return undefined;
  const type = own(payload, 'type');
  if (typeof type !== 'string') return undefined;
  switch (type) {
    case 'task_complete':
    case 'turn_aborted':
      return { failure: null };
    case 'error':
      return { failure: mapErrorInfo(errorInfoOf(payload)) };
    default:
      return undefined;
  }
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

/** The last terminal event of one tail, scanning lines from the end. */
function lastTerminal(tail: SessionTail): Terminal | undefined {
  const text = usableText(tail);
  let end = text.length;
  while (end > 0) {
    const newline = text.lastIndexOf('\n', end - 1);
    const terminal = terminalOf(parseLine(text.slice(newline + 1, end)));
    if (terminal !== undefined) return terminal;
    end = newline === -1 ? 0 : newline;
  }
  return undefined;
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

/**
 * The provider failure signalled by the most recent terminal event (newest file first, then
 * the last terminal line of that file), or null when that event is a success, an abort, an
 * unknown error variant, or when there is no terminal event at all.
 */
export function reduceSessionTails(tails: readonly SessionTail[]): ProviderFailure | null {
  if (!Array.isArray(tails)) return null;
  for (const tail of newestFirst(tails)) {
    const terminal = lastTerminal(tail);
    if (terminal !== undefined) return terminal.failure;
  }
  return null;
}
