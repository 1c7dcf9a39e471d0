import { describe, expect, it } from 'vitest';
import {
  diagnoseSessionTails,
  MAX_SESSION_FILES,
  MAX_TAIL_BYTES,
  reduceSessionTails,
} from '../../../src/core/provider-failure.js';
import type { SessionTail } from '../../../src/core/provider-failure.js';
import { PROVIDER_FAILURE_SCHEMA } from '../../../src/core/result.js';

const eventLine = (payload: unknown): string =>
  JSON.stringify({ timestamp: '2025-01-01T00:00:00.000Z', type: 'event_msg', payload });
const errorLine = (info: unknown, message = 'stream failed'): string =>
  eventLine({ type: 'error', message, codex_error_info: info });
const QUIET = '{"type":"response_item","payload":{"type":"message"}}';
const completeLine = (): string => eventLine({ type: 'task_complete', last_agent_message: 'done' });
const tail = (lines: readonly string[], mtimeMs = 1_000, partial = false): SessionTail => ({
  mtimeMs,
  text: `${lines.join('\n')}\n`,
  partial,
});
const failure = (kind: string, httpStatus: number | null) => ({
  schema: PROVIDER_FAILURE_SCHEMA,
  kind,
  http_status: httpStatus,
});

describe('reduceSessionTails: spellings', () => {
  it('maps the snake_case rollout form with its status', () => {
    const out = reduceSessionTails([
      tail([errorLine({ response_too_many_failed_attempts: { http_status_code: 429 } })]),
    ]);
    expect(out).toEqual(failure('response_too_many_failed_attempts', 429));
  });

  it('maps the camelCase app-server form to the snake_case kind', () => {
    const out = reduceSessionTails([
      tail([errorLine({ responseTooManyFailedAttempts: { httpStatusCode: 429 } })]),
    ]);
    expect(out).toEqual(failure('response_too_many_failed_attempts', 429));
  });

  it('maps a bare string variant (snake and camel) with a null status', () => {
    expect(reduceSessionTails([tail([errorLine('usage_limit_exceeded')])])).toEqual(
      failure('usage_limit_exceeded', null),
    );
    expect(reduceSessionTails([tail([errorLine('usageLimitExceeded')])])).toEqual(
      failure('usage_limit_exceeded', null),
    );
  });

  it.each([
    ['http_connection_failed', 'http_connection_failed'],
    ['httpConnectionFailed', 'http_connection_failed'],
    ['response_stream_connection_failed', 'response_stream_connection_failed'],
    ['responseStreamConnectionFailed', 'response_stream_connection_failed'],
    ['response_stream_disconnected', 'response_stream_disconnected'],
    ['responseStreamDisconnected', 'response_stream_disconnected'],
  ])('maps the %s variant', (variant, kind) => {
    const out = reduceSessionTails([tail([errorLine({ [variant]: { http_status_code: 502 } })])]);
    expect(out).toEqual(failure(kind, 502));
  });

  it('accepts a null status (http_status_code: null)', () => {
    const out = reduceSessionTails([
      tail([errorLine({ http_connection_failed: { http_status_code: null } })]),
    ]);
    expect(out).toEqual(failure('http_connection_failed', null));
  });
});

describe('reduceSessionTails: which event wins', () => {
  it('lets a later task_complete in the same file supersede an earlier failure', () => {
    const out = reduceSessionTails([tail([errorLine('usage_limit_exceeded'), completeLine()])]);
    expect(out).toBeNull();
  });

  it('reports a failure that follows a task_complete', () => {
    const out = reduceSessionTails([tail([completeLine(), errorLine('usage_limit_exceeded')])]);
    expect(out).toEqual(failure('usage_limit_exceeded', null));
  });

  it('takes the newest file by mtime, whatever the input order', () => {
    const older = tail([errorLine({ http_connection_failed: { http_status_code: 503 } })], 1_000);
    const newer = tail([errorLine({ response_stream_disconnected: { http_status_code: 500 } })], 2_000);
    expect(reduceSessionTails([newer, older])).toEqual(failure('response_stream_disconnected', 500));
    expect(reduceSessionTails([older, newer])).toEqual(failure('response_stream_disconnected', 500));
  });

  it('falls back to an older file when the newest has no terminal event', () => {
    const older = tail([errorLine('usage_limit_exceeded')], 1_000);
    const newer = tail([eventLine({ type: 'agent_message', message: 'hi' })], 2_000);
    expect(reduceSessionTails([older, newer])).toEqual(failure('usage_limit_exceeded', null));
  });

  it('a success in a newer file hides a failure in an older one', () => {
    const older = tail([errorLine('usage_limit_exceeded')], 1_000);
    const newer = tail([completeLine()], 2_000);
    expect(reduceSessionTails([older, newer])).toBeNull();
  });

  it('treats turn_aborted as terminal with no failure', () => {
    expect(
      reduceSessionTails([
        tail([errorLine('usage_limit_exceeded'), eventLine({ type: 'turn_aborted', reason: 'interrupted' })]),
      ]),
    ).toBeNull();
  });

  it('does not treat stream_error as terminal', () => {
    const out = reduceSessionTails([
      tail([errorLine('usage_limit_exceeded'), eventLine({ type: 'stream_error', message: 'retrying' })]),
    ]);
    expect(out).toEqual(failure('usage_limit_exceeded', null));
  });

  it('returns null for no tails or no terminal events', () => {
    expect(reduceSessionTails([])).toBeNull();
    expect(reduceSessionTails([tail([eventLine({ type: 'agent_message', message: 'x' })])])).toBeNull();
  });
});

describe('reduceSessionTails: shapes', () => {
  it('skips a payload whose type is not a string, without throwing', () => {
    const hostile = JSON.stringify({ type: 'event_msg', payload: { type: [] } });
    const out = reduceSessionTails([tail([errorLine('usage_limit_exceeded'), hostile])]);
    expect(out).toEqual(failure('usage_limit_exceeded', null));
  });

  it('skips payloads that are not objects and lines that are not JSON objects', () => {
    const lines = [
      errorLine('usage_limit_exceeded'),
      '{"type":"event_msg","payload":"error"}',
      '[1,2]',
      '42',
      'not json',
      '{"type":',
    ];
    expect(reduceSessionTails([tail(lines)])).toEqual(failure('usage_limit_exceeded', null));
  });

  it.each([[429.5], ['429'], [99], [600], [-429], [true], [{ code: 429 }]])(
    'gives a null status for %j',
    (status) => {
      const out = reduceSessionTails([
        tail([errorLine({ response_too_many_failed_attempts: { http_status_code: status } })]),
      ]);
      expect(out).toEqual(failure('response_too_many_failed_attempts', null));
    },
  );

  it('accepts the boundaries 100 and 599', () => {
    const at = (s: number) =>
      reduceSessionTails([tail([errorLine({ http_connection_failed: { http_status_code: s } })])]);
    expect(at(100)?.http_status).toBe(100);
    expect(at(599)?.http_status).toBe(599);
  });

  it.each([
    ['an unknown variant', { context_window_exceeded: null }],
    ['an unknown bare string', 'other'],
    ['a missing codex_error_info', undefined],
    [
      'two variants at once',
      { usage_limit_exceeded: null, http_connection_failed: { http_status_code: 500 } },
    ],
    ['a prototype key', JSON.parse('{"__proto__":{"http_status_code":429}}')],
    ['constructor', 'constructor'],
    ['toString as a key', { toString: { http_status_code: 429 } }],
  ])('maps %s to null', (_name, info) => {
    expect(reduceSessionTails([tail([errorLine(info)])])).toBeNull();
  });

  it('never copies message text or unknown fields into the output', () => {
    const secret = 'sk-live-SECRET-token-do-not-leak-0123456789';
    const info = {
      response_too_many_failed_attempts: { http_status_code: 429, detail: secret },
      [secret]: 1,
    };
    const line = eventLine({
      type: 'error',
      message: secret,
      additional_details: secret,
      codex_error_info: { response_too_many_failed_attempts: { http_status_code: 429, detail: secret } },
    });
    const out = reduceSessionTails([tail([line])]);
    expect(out).toEqual(failure('response_too_many_failed_attempts', 429));
    expect(Object.keys(out ?? {})).toEqual(['schema', 'kind', 'http_status']);
    expect(JSON.stringify(out)).not.toContain('SECRET');
    expect(JSON.stringify(reduceSessionTails([tail([errorLine(info, secret)])]))).toBe('null');
  });
});

describe('reduceSessionTails: bounds', () => {
  it('drops the first line of a partial read, even when it is complete JSON', () => {
    const text = `${errorLine('usage_limit_exceeded')}\n${eventLine({ type: 'agent_message', message: 'x' })}\n`;
    expect(reduceSessionTails([{ mtimeMs: 1, text, partial: true }])).toBeNull();
    expect(reduceSessionTails([{ mtimeMs: 1, text, partial: false }])).toEqual(
      failure('usage_limit_exceeded', null),
    );
  });

  it('ignores a partial read with no newline at all', () => {
    expect(
      reduceSessionTails([{ mtimeMs: 1, text: errorLine('usage_limit_exceeded'), partial: true }]),
    ).toBeNull();
  });

  it('considers only the newest MAX_SESSION_FILES tails', () => {
    const oldest = tail([errorLine('usage_limit_exceeded')], 0);
    const quiet = Array.from({ length: MAX_SESSION_FILES }, (_, i) =>
      tail(['{"type":"session_meta","payload":{}}'], i + 1),
    );
    expect(reduceSessionTails([oldest, ...quiet])).toBeNull();
    expect(reduceSessionTails([oldest, ...quiet.slice(1)])).toEqual(failure('usage_limit_exceeded', null));
  });

  it('reads at most the last MAX_TAIL_BYTES characters of an oversized text', () => {
    const filler = `${'{"type":"response_item","payload":{}}\n'.repeat(Math.ceil(MAX_TAIL_BYTES / 38))}`;
    const text = `${errorLine('usage_limit_exceeded')}\n${filler}`;
    expect(reduceSessionTails([{ mtimeMs: 1, text, partial: false }])).toBeNull();
    expect(
      reduceSessionTails([
        {
          mtimeMs: 1,
          text: `${errorLine('usage_limit_exceeded')}\n${filler.slice(0, 1000)}`,
          partial: false,
        },
      ]),
    ).toEqual(failure('usage_limit_exceeded', null));
  });

  it('skips lines nested deeper than a terminal event ever is, without parsing them', () => {
    const deep = `{"type":"event_msg","payload":{"type":"error","codex_error_info":"usage_limit_exceeded","x":${'['.repeat(40)}${']'.repeat(40)}}}`;
    expect(reduceSessionTails([tail([deep])])).toBeNull();
    const bracketsInText = errorLine('usage_limit_exceeded', `${'[{'.repeat(100)}\\"`);
    expect(reduceSessionTails([tail([bracketsInText])])).toEqual(failure('usage_limit_exceeded', null));
  });

  it('accepts CRLF line endings', () => {
    const text = `${completeLine()}\r\n${errorLine('usage_limit_exceeded')}\r\n`;
    expect(reduceSessionTails([{ mtimeMs: 1, text, partial: false }])).toEqual(
      failure('usage_limit_exceeded', null),
    );
  });
});

describe('reduceSessionTails: turns (Codex ≥ 0.145 and app-server rollouts)', () => {
  const started = (turnId?: string) =>
    eventLine({ type: 'task_started', ...(turnId === undefined ? {} : { turn_id: turnId }) });
  const ended = (turnId: string | undefined, error?: unknown, type = 'task_complete') =>
    eventLine({
      type,
      ...(turnId === undefined ? {} : { turn_id: turnId }),
      last_agent_message: null,
      ...(error === undefined ? {} : { error }),
    });
  const turnError = (info: unknown, turnId?: string) =>
    eventLine({
      type: 'error',
      message: 'x',
      codex_error_info: info,
      ...(turnId === undefined ? {} : { turn_id: turnId }),
    });
  const rtmfa429 = { response_too_many_failed_attempts: { http_status_code: 429 } };

  it('reads the failure from the turn end’s own error (snake and camel)', () => {
    expect(
      reduceSessionTails([tail([started('t1'), ended('t1', { message: 'm', codex_error_info: rtmfa429 })])]),
    ).toEqual(failure('response_too_many_failed_attempts', 429));
    expect(
      reduceSessionTails([tail([ended('t1', { message: 'm', codexErrorInfo: { serverOverloaded: null } })])]),
    ).toEqual(failure('server_overloaded', null));
  });

  it.each(['turn_complete', 'turn_aborted'])('reads the error of a %s end too', (type) => {
    expect(
      reduceSessionTails([tail([ended('t1', { codex_error_info: 'rate_limit_exceeded' }, type)])]),
    ).toEqual(failure('rate_limit_exceeded', null));
  });

  it('an error line of the same turn is not overridden by that turn’s own completion', () => {
    const lines = [started('t1'), turnError(rtmfa429, 't1'), ended('t1')];
    expect(reduceSessionTails([tail(lines)])).toEqual(failure('response_too_many_failed_attempts', 429));
  });

  it('without turn ids, an error between the turn’s start and its end belongs to it', () => {
    expect(
      reduceSessionTails([tail([started(), turnError('internal_server_error'), ended(undefined)])]),
    ).toEqual(failure('internal_server_error', null));
  });

  it('without ids and without a recorded start, an error before the end is not attributed to it', () => {
    expect(reduceSessionTails([tail([turnError('internal_server_error'), ended(undefined)])])).toBeNull();
  });

  it('an error of another turn does not count for the newest turn', () => {
    const lines = [
      started('t1'),
      turnError(rtmfa429, 't1'),
      ended('t1'),
      started('t2'),
      turnError('usage_limit_exceeded', 't1'),
      ended('t2'),
    ];
    expect(reduceSessionTails([tail(lines)])).toBeNull();
  });

  it('a later turn that ended without failure supersedes an earlier failed turn', () => {
    const failed = [started('t1'), ended('t1', { codex_error_info: rtmfa429 })];
    expect(reduceSessionTails([tail([...failed, started('t2'), ended('t2')])])).toBeNull();
    expect(reduceSessionTails([tail([...failed, started('t2'), ended('t2', null)])])).toBeNull(); // error: null = none
    const viaLine = [started('t1'), turnError(rtmfa429, 't1'), ended('t1')];
    expect(reduceSessionTails([tail([...viaLine, started('t2'), ended('t2')])])).toBeNull();
  });

  it('a later failed turn wins over an earlier successful one', () => {
    const lines = [
      started('t1'),
      ended('t1'),
      started('t2'),
      ended('t2', { codex_error_info: 'usage_limit_exceeded' }),
    ];
    expect(reduceSessionTails([tail(lines)])).toEqual(failure('usage_limit_exceeded', null));
  });

  it('an unknown variant in the newest turn decides as unknown (null), not an older failure', () => {
    const lines = [
      started('t1'),
      ended('t1', { codex_error_info: rtmfa429 }),
      started('t2'),
      ended('t2', { codex_error_info: 'other' }),
    ];
    expect(reduceSessionTails([tail(lines)])).toBeNull();
    expect(
      reduceSessionTails([tail([ended('t1', { codex_error_info: 'context_window_exceeded' })])]),
    ).toBeNull();
  });

  it('an error recorded after the newest end (a turn that never ended) decides', () => {
    const lines = [started('t1'), ended('t1'), started('t2'), turnError(rtmfa429, 't2')];
    expect(reduceSessionTails([tail(lines)])).toEqual(failure('response_too_many_failed_attempts', 429));
  });

  it('ignores a malformed error field and malformed turn ids', () => {
    expect(reduceSessionTails([tail([ended('t1', 'exceeded retry limit')])])).toBeNull();
    expect(reduceSessionTails([tail([ended('t1', [rtmfa429])])])).toBeNull();
    const odd = eventLine({ type: 'error', codex_error_info: rtmfa429, turn_id: { id: 't1' } });
    expect(reduceSessionTails([tail([started(), odd, ended('t1')])])).toEqual(
      failure('response_too_many_failed_attempts', 429),
    );
  });
});

describe('diagnoseSessionTails: what the diagnosis rests on', () => {
  it('tells "nothing recorded" from "the last turn succeeded"', () => {
    const nothing = diagnoseSessionTails([
      tail([eventLine({ type: 'user_message', message: 'x' }), '{"type":"turn_context","payload":{}}']),
    ]);
    expect(nothing).toEqual({ provider_failure: null, files_read: 1, lines_read: 2, turn_end_found: false });
    const succeeded = diagnoseSessionTails([tail([eventLine({ type: 'task_started' }), completeLine()])]);
    expect(succeeded).toEqual({ provider_failure: null, files_read: 1, lines_read: 2, turn_end_found: true });
  });

  it('counts the lines of every tail considered and finds a turn end in an older one', () => {
    const older = tail([completeLine(), errorLine('usage_limit_exceeded')], 1_000);
    const newer = tail([errorLine('bad_request'), QUIET], 2_000);
    expect(diagnoseSessionTails([older, newer])).toEqual({
      provider_failure: null,
      files_read: 2,
      lines_read: 4,
      turn_end_found: true,
    });
  });

  it('counts nothing for no tails', () => {
    expect(diagnoseSessionTails([])).toEqual({
      provider_failure: null,
      files_read: 0,
      lines_read: 0,
      turn_end_found: false,
    });
  });
});
