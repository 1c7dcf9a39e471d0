import { seededRandom } from '../support/seeded-random.js';
import { describe, expect, it } from 'vitest';
import { MAX_TAIL_BYTES, reduceSessionTails } from '../../src/core/provider-failure.js';
import type { SessionTail } from '../../src/core/provider-failure.js';
import type { ProviderFailure } from '../../src/core/result.js';

/**
 * Property test of the reducer over generated hostile session tails: seeded, deterministic.
 * A failing case prints its seed and index so it can be replayed.
 */

const CASES = 10_000;
const SEED = 0x5eed_2025;

const SNAKE_KINDS = [
  'response_too_many_failed_attempts',
  'http_connection_failed',
  'response_stream_connection_failed',
  'response_stream_disconnected',
  'usage_limit_exceeded',
  'rate_limit_exceeded',
  'server_overloaded',
  'internal_server_error',
];
const CAMEL_KINDS = SNAKE_KINDS.map((k) => k.replace(/_([a-z])/g, (_m, c: string) => c.toUpperCase()));
const HOSTILE_KEYS = [
  '__proto__',
  'constructor',
  'prototype',
  'toString',
  'valueOf',
  'hasOwnProperty',
  '__defineGetter__',
];
const FIELD_KEYS = [
  'type',
  'payload',
  'message',
  'codex_error_info',
  'codexErrorInfo',
  'http_status_code',
  'httpStatusCode',
];
const PAYLOAD_TYPES = [
  'error',
  'task_started',
  'turn_started',
  'task_complete',
  'turn_complete',
  'turn_aborted',
  'stream_error',
  'agent_message',
  'token_count',
];
const TURN_IDS = ['t-1', 't-2', '', 'constructor'];
const OTHER_VARIANTS = ['context_window_exceeded', 'bad_request', 'unauthorized', 'other', 'sandbox_error'];
const ALPHABET = 'abcXYZ019 _-"\\/{}[]:,\n\r\t\u0000\u00e9\u4e2d\ud83d\ude00\ud800\uffff';

/** Built once: deep nesting (up to 200,000 levels, rarely) and huge lines around the tail size. */
const DEEP_LINES = [33, 33, 1_000, 1_000, 20_000, 200_000].flatMap((depth) =>
  [`${'['.repeat(depth)}${']'.repeat(depth)}`, `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`].map(
    (inner) => `{"type":"event_msg","payload":{"type":"error","codex_error_info":${inner}}}`,
  ),
);
const HUGE_SECRET = 'HUGE-secret-text-that-must-never-leak';
const HUGE_LINES = [MAX_TAIL_BYTES - 4_096, MAX_TAIL_BYTES + 4_096].flatMap((sizeBytes) =>
  ['"usage_limit_exceeded"', '{"http_connection_failed":{"http_status_code":503}}'].map(
    (info) =>
      `{"type":"event_msg","payload":{"type":"error","message":"${HUGE_SECRET}${'x'.repeat(sizeBytes)}","codex_error_info":${info}}}`,
  ),
);

class Gen {
  readonly secrets: string[] = [];
  constructor(private readonly next: () => number) {}

  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)] as T;
  }

  /** Free text; every string longer than 16 characters is recorded as one that must never leak. */
  text(maxLength = 40): string {
    let s = '';
    const length = this.int(maxLength + 1);
    for (let i = 0; i < length; i += 1) s += ALPHABET[this.int(ALPHABET.length)] ?? '';
    if (s.length > 16) this.secrets.push(s);
    return s;
  }

  key(): string {
    const r = this.int(10);
    if (r < 3) return this.pick(HOSTILE_KEYS);
    if (r < 6) return this.pick(FIELD_KEYS);
    if (r < 8) return this.pick([...SNAKE_KINDS, ...CAMEL_KINDS, ...OTHER_VARIANTS]);
    return this.text(24);
  }

  status(): unknown {
    return this.pick<() => unknown>([
      () => this.int(700) - 50,
      () => 429,
      () => this.next() * 600,
      () => String(this.int(600)),
      () => null,
      () => [429],
      () => ({ code: 429 }),
      () => 2 ** 60,
      () => -0,
    ])();
  }

  json(depth = 0): unknown {
    const r = this.int(depth > 3 ? 6 : 9);
    if (r === 0) return null;
    if (r === 1) return this.chance(0.5);
    if (r === 2) return this.status();
    if (r <= 5) return this.chance(0.5) ? this.text() : this.key();
    if (r === 6) return Array.from({ length: this.int(4) }, () => this.json(depth + 1));
    const obj: Record<string, unknown> = {};
    for (let i = this.int(4); i > 0; i -= 1)
      Object.defineProperty(obj, this.key(), {
        value: this.json(depth + 1),
        enumerable: true,
        configurable: true,
        writable: true,
      });
    return obj;
  }

  errorInfo(): unknown {
    const variant = this.pick([...SNAKE_KINDS, ...CAMEL_KINDS, ...OTHER_VARIANTS, ...HOSTILE_KEYS]);
    return this.pick<() => unknown>([
      () => variant,
      () => ({
        [variant]: {
          [this.pick(['http_status_code', 'httpStatusCode'])]: this.status(),
          detail: this.text(),
        },
      }),
      () => ({ [variant]: this.json(2) }),
      () => ({ [variant]: null, [this.key()]: this.json(2) }),
      () => this.json(1),
    ])();
  }

  /** A near-valid rollout line with one or more fields mutated. */
  eventLine(): string {
    const payload: Record<string, unknown> = {
      type: this.chance(0.85) ? this.pick(PAYLOAD_TYPES) : this.json(2),
      message: this.text(),
    };
    if (this.chance(0.8)) payload[this.pick(['codex_error_info', 'codexErrorInfo'])] = this.errorInfo();
    if (this.chance(0.5))
      payload[this.pick(['turn_id', 'turnId'])] = this.chance(0.8) ? this.pick(TURN_IDS) : this.json(1);
    // A turn end carries its failure in `error` since Codex 0.145.
    if (this.chance(0.4))
      payload.error = this.chance(0.8)
        ? { message: this.text(), [this.pick(['codex_error_info', 'codexErrorInfo'])]: this.errorInfo() }
        : this.json(1);
    if (this.chance(0.2)) payload[this.key()] = this.json(1);
    const top = {
      timestamp: this.text(),
      type: this.chance(0.9) ? 'event_msg' : this.json(1),
      payload: this.chance(0.9) ? payload : this.json(1),
    };
    return JSON.stringify(top) ?? 'undefined';
  }

  deepLine(): string {
    return this.pick(DEEP_LINES);
  }

  hugeLine(): string {
    this.secrets.push(HUGE_SECRET);
    return this.pick(HUGE_LINES);
  }

  /** Random bytes, or a valid line with some bytes corrupted, decoded as UTF-8. */
  invalidUtf8Line(): string {
    const bytes = this.chance(0.5) ? Buffer.from(this.eventLine()) : Buffer.alloc(this.int(64));
    for (let i = this.int(8); i > 0 && bytes.length > 0; i -= 1)
      bytes[this.int(bytes.length)] = this.int(256);
    return bytes.toString('utf8');
  }

  line(): string {
    const r = this.next();
    if (r < 0.45) return this.eventLine();
    if (r < 0.55) return JSON.stringify(this.json()) ?? '';
    if (r < 0.65) return this.eventLine().slice(0, this.int(80));
    if (r < 0.8) return this.invalidUtf8Line();
    if (r < 0.983) return this.text(60);
    if (r < 0.9995) return this.deepLine().slice(0, this.chance(0.5) ? undefined : this.int(200));
    return this.hugeLine();
  }

  tail(): SessionTail {
    const lines = Array.from({ length: this.int(8) }, () => this.line());
    const mtimeMs = this.pick<() => number>([
      () => this.int(5),
      () => this.int(1e12),
      () => NaN,
      () => Infinity,
      () => -Infinity,
      () => -1,
    ])();
    const separator = this.chance(0.9) ? '\n' : '\r\n';
    return {
      mtimeMs,
      text: lines.join(separator) + (this.chance(0.7) ? separator : ''),
      partial: this.chance(0.3),
    };
  }

  tails(): SessionTail[] {
    const count = this.chance(0.02) ? 30 + this.int(10) : this.int(5);
    return Array.from({ length: count }, () => this.tail());
  }
}

function assertValidOutput(out: ProviderFailure | null, secrets: readonly string[], where: string): void {
  if (out === null) return;
  const ok =
    Object.keys(out).join(',') === 'schema,kind,http_status' &&
    out.schema === 'roboguide.provider_failure/v1' &&
    SNAKE_KINDS.includes(out.kind) &&
    (out.http_status === null ||
      (Number.isInteger(out.http_status) && out.http_status >= 100 && out.http_status <= 599));
  if (!ok) throw new Error(`${where}: invalid output ${JSON.stringify(out)}`);
  const serialized = JSON.stringify(out);
  const leaked = secrets.find((s) => serialized.includes(s));
  if (leaked !== undefined)
    throw new Error(`${where}: input text leaked into output: ${JSON.stringify(leaked)}`);
}

const NEWEST = 1e15;
const completeTail: SessionTail = {
  mtimeMs: NEWEST,
  text: '{"type":"event_msg","payload":{"type":"task_complete"}}\n',
  partial: false,
};
const failureTail: SessionTail = {
  mtimeMs: NEWEST,
  text: '{"type":"event_msg","payload":{"type":"error","codex_error_info":{"httpConnectionFailed":{"httpStatusCode":503}}}}\n',
  partial: false,
};

const failedTurnTail: SessionTail = {
  mtimeMs: NEWEST,
  text:
    '{"type":"event_msg","payload":{"type":"task_started","turn_id":"t-9"}}\n' +
    '{"type":"event_msg","payload":{"type":"task_complete","turn_id":"t-9","last_agent_message":null,' +
    '"error":{"message":"x","codex_error_info":{"response_too_many_failed_attempts":{"http_status_code":429}}}}}\n',
  partial: false,
};

describe('reduceSessionTails under generated hostile input', () => {
  it(`never throws, returns only valid allowlisted objects and leaks no text (${CASES} cases)`, () => {
    const gen = new Gen(seededRandom(SEED));
    let failures = 0;
    for (let i = 0; i < CASES; i += 1) {
      gen.secrets.length = 0;
      const tails = gen.tails();
      const where = `seed ${SEED} case ${i}`;
      let out: ProviderFailure | null;
      try {
        out = reduceSessionTails(tails);
      } catch (err) {
        throw new Error(`${where}: reduceSessionTails threw`, { cause: err });
      }
      assertValidOutput(out, gen.secrets, where);
      if (out !== null) failures += 1;
      // Metamorphic: a strictly newer file decides, whatever the older ones hold.
      expect(reduceSessionTails([...tails, completeTail]), where).toBeNull();
      expect(reduceSessionTails([failureTail, ...tails]), where).toEqual({
        schema: 'roboguide.provider_failure/v1',
        kind: 'http_connection_failed',
        http_status: 503,
      });
      expect(reduceSessionTails([failedTurnTail, ...tails]), where).toEqual({
        schema: 'roboguide.provider_failure/v1',
        kind: 'response_too_many_failed_attempts',
        http_status: 429,
      });
      // Lines appended after a failed turn's end that end no turn and record no error change nothing.
      const last = tails.at(-1);
      if (last !== undefined) {
        const failedThenQuiet = {
          ...last,
          mtimeMs: NEWEST,
          text: `${failedTurnTail.text}{"type":"event_msg","payload":{"type":"token_count"}}\n`,
        };
        expect(reduceSessionTails([...tails, failedThenQuiet]), where).toEqual(
          reduceSessionTails([failedTurnTail]),
        );
      }
    }
    // The generator must reach the mapping path, or the properties above prove little.
    expect(failures).toBeGreaterThan(CASES / 50);
  }, 120_000); // 10,000 cases × 5 reductions: seconds alone, far more on a loaded shared machine
});
