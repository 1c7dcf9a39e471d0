import { describe, expect, it } from 'vitest';
import {
  checkOutcome,
  formatOutcomeProblem,
  gpuObservation,
  jsonDepthExceeds,
  MAX_OUTCOME_BYTES,
  MAX_OUTCOME_DEPTH,
  outcomeProblemsOf,
} from '../../../src/core/outcome.js';
import type { Outcome, OutcomeCheck } from '../../../src/core/outcome.js';

const encode = (text: string): Uint8Array => new TextEncoder().encode(text);
const present = (value: unknown): OutcomeCheck =>
  checkOutcome({ state: 'present', bytes: encode(JSON.stringify(value)) });

const base = { job_id: 'pair-0001', infrastructure_failure: false, fatal_failure: false, arms: {} };
const without = (key: keyof typeof base): Record<string, unknown> => {
  const copy: Record<string, unknown> = { ...base };
  delete copy[key];
  return copy;
};

function problemsOf(check: OutcomeCheck): string[] {
  if (check.kind !== 'invalid') throw new Error(`expected invalid, got ${check.kind}`);
  return check.problems;
}

describe('checkOutcome: reading', () => {
  it('reports a missing file as missing', () => {
    expect(checkOutcome({ state: 'missing' })).toEqual({ kind: 'missing' });
  });

  it('reports an unreadable file as unparseable', () => {
    expect(checkOutcome({ state: 'unreadable', code: 'EACCES' })).toEqual({ kind: 'unparseable' });
  });

  it.each([
    ['empty file', new Uint8Array()],
    ['not JSON', encode('{"job_id": "pair-0001",')],
    ['invalid UTF-8', Uint8Array.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d])],
    ['truncated UTF-8 sequence', Uint8Array.from([...encode('{"job_id":"'), 0xe2, 0x82, ...encode('"}')])],
  ])('reports %s as unparseable', (_name, bytes) => {
    expect(checkOutcome({ state: 'present', bytes })).toEqual({ kind: 'unparseable' });
  });

  it('refuses an outcome nested deeper than 64 levels before parsing it (5,000 levels: no stack overflow)', () => {
    const deep = (n: number): string =>
      `{"job_id":"pair-0001","infrastructure_failure":false,"fatal_failure":false,"arms":${'['.repeat(n)}${']'.repeat(n)}}`;
    expect(checkOutcome({ state: 'present', bytes: encode(deep(5_000)) })).toEqual({ kind: 'too_deep' });
    expect(checkOutcome({ state: 'present', bytes: encode(deep(MAX_OUTCOME_DEPTH)) })).toEqual({
      kind: 'too_deep',
    });
    expect(checkOutcome({ state: 'present', bytes: encode(deep(MAX_OUTCOME_DEPTH - 1)) }).kind).toBe('valid');
  });

  it('counts only brackets outside strings, escaped quotes included', () => {
    const brackets = '[{'.repeat(100);
    const text = JSON.stringify({ ...base, note: brackets, quoted: `\\"${brackets}` });
    expect(checkOutcome({ state: 'present', bytes: encode(text) }).kind).toBe('valid');
    expect(jsonDepthExceeds(encode('[[["]]]]]"]]]'), 3)).toBe(false);
    expect(jsonDepthExceeds(encode('[[[[]]]]'), 3)).toBe(true);
  });

  it('refuses an outcome over the size limit unparsed', () => {
    expect(checkOutcome({ state: 'too_large', sizeBytes: MAX_OUTCOME_BYTES + 1 })).toEqual({
      kind: 'too_large',
    });
    expect(checkOutcome({ state: 'present', bytes: new Uint8Array(MAX_OUTCOME_BYTES + 1) })).toEqual({
      kind: 'too_large',
    });
  });

  it('accepts a UTF-8 byte order mark before the JSON', () => {
    const bytes = Uint8Array.from([0xef, 0xbb, 0xbf, ...encode(JSON.stringify(base))]);
    expect(checkOutcome({ state: 'present', bytes }).kind).toBe('valid');
  });
});

describe('checkOutcome: contract', () => {
  it('accepts the minimal outcome', () => {
    expect(present(base)).toEqual({ kind: 'valid', outcome: base, raw: base });
  });

  it('keeps arms and every extra field verbatim (no verdict is rewritten)', () => {
    const text =
      '{"job_id":"pair-0007","infrastructure_failure":false,"fatal_failure":false,' +
      '"arms":{"a":{"official":"unavailable","driver":"Mission Completed"},"b":{"official":false,"hold":true}},' +
      '"resource_usage":{"both_arms_measured":true,"peak_job_gpu_mib":36000,"note":"x"},' +
      '"e1_attempt":{"provider_incidents":[{"http_status":502,"requires_stop":false,"message":"bad gateway"}],"n":2},' +
      '"driver_version":"1.4.2","nested":{"deep":[1,null,"two"]}}';
    const check = checkOutcome({ state: 'present', bytes: encode(text) });
    expect(check.kind).toBe('valid');
    if (check.kind !== 'valid') return;
    expect(check.raw).toEqual(JSON.parse(text));
    expect(JSON.stringify(check.raw)).toBe(text);
    expect(check.outcome).toBe(check.raw);
    expect(check.outcome.arms).toEqual({
      a: { official: 'unavailable', driver: 'Mission Completed' },
      b: { official: false, hold: true },
    });
  });

  it.each([null, 'unavailable', 0, [], false])('accepts any JSON value as arms (%j)', (arms) => {
    expect(present({ ...base, arms }).kind).toBe('valid');
  });

  it.each([
    ['array', [base]],
    ['null', null],
    ['number', 42],
    ['string', 'pair-0001'],
  ])('rejects a JSON %s and keeps it as raw', (_name, value) => {
    expect(present(value)).toEqual({
      kind: 'invalid',
      problems: ['outcome: must be a JSON object'],
      raw: value,
    });
  });

  it.each([
    ['job_id missing', without('job_id'), 'job_id: is required (a string: ROBOGUIDE_JOB_ID)'],
    ['job_id a number', { ...base, job_id: 1 }, 'job_id: must be a string'],
    [
      'infrastructure_failure missing',
      without('infrastructure_failure'),
      'infrastructure_failure: is required (true or false; there is no default)',
    ],
    [
      'infrastructure_failure a string',
      { ...base, infrastructure_failure: 'false' },
      'infrastructure_failure: must be a boolean',
    ],
    [
      'fatal_failure missing',
      without('fatal_failure'),
      'fatal_failure: is required (true or false; there is no default)',
    ],
    ['fatal_failure a number', { ...base, fatal_failure: 0 }, 'fatal_failure: must be a boolean'],
    ['arms missing', without('arms'), 'arms: is required (any JSON value: kept verbatim, never read)'],
    ['resource_usage an array', { ...base, resource_usage: [] }, 'resource_usage: must be an object'],
    ['resource_usage null', { ...base, resource_usage: null }, 'resource_usage: must be an object'],
    [
      'both_arms_measured a string',
      { ...base, resource_usage: { both_arms_measured: 'true' } },
      'resource_usage.both_arms_measured: must be a boolean',
    ],
    [
      'peak a string',
      { ...base, resource_usage: { peak_job_gpu_mib: '36000' } },
      'resource_usage.peak_job_gpu_mib: must be a number',
    ],
    ['e1_attempt a string', { ...base, e1_attempt: 'x' }, 'e1_attempt: must be an object'],
    [
      'provider_incidents an object',
      { ...base, e1_attempt: { provider_incidents: {} } },
      'e1_attempt.provider_incidents: must be an array',
    ],
    [
      'incident not an object',
      { ...base, e1_attempt: { provider_incidents: [429] } },
      'e1_attempt.provider_incidents[0]: must be an object',
    ],
    [
      'incident without http_status',
      { ...base, e1_attempt: { provider_incidents: [{ requires_stop: false }] } },
      'e1_attempt.provider_incidents[0].http_status: must be an integer or null',
    ],
    [
      'incident with a fractional status',
      { ...base, e1_attempt: { provider_incidents: [{ http_status: 502.5, requires_stop: false }] } },
      'e1_attempt.provider_incidents[0].http_status: must be an integer or null',
    ],
    [
      'incident with a string status',
      { ...base, e1_attempt: { provider_incidents: [{ http_status: '502', requires_stop: false }] } },
      'e1_attempt.provider_incidents[0].http_status: must be an integer or null',
    ],
    [
      'second incident without requires_stop',
      {
        ...base,
        e1_attempt: {
          provider_incidents: [{ http_status: 502, requires_stop: false }, { http_status: 429 }],
        },
      },
      'e1_attempt.provider_incidents[1].requires_stop: must be a boolean',
    ],
  ])('rejects %s', (_name, value, problem) => {
    const check = present(value);
    expect(problemsOf(check)).toEqual([problem]);
    expect(check).toMatchObject({ raw: value });
  });

  it('lists every problem at once', () => {
    expect(problemsOf(present({ arms: 1, e1_attempt: [] }))).toEqual([
      'job_id: is required (a string: ROBOGUIDE_JOB_ID)',
      'infrastructure_failure: is required (true or false; there is no default)',
      'fatal_failure: is required (true or false; there is no default)',
      'e1_attempt: must be an object',
    ]);
  });

  it.each([
    ['empty resource_usage', { resource_usage: {} }],
    ['peak null', { resource_usage: { both_arms_measured: false, peak_job_gpu_mib: null } }],
    ['e1_attempt without incidents', { e1_attempt: { attempt: 1 } }],
    ['empty incidents', { e1_attempt: { provider_incidents: [] } }],
    [
      'incident with a null status',
      { e1_attempt: { provider_incidents: [{ http_status: null, requires_stop: true }] } },
    ],
  ])('accepts %s', (_name, extra) => {
    expect(present({ ...base, ...extra }).kind).toBe('valid');
  });
});

describe('gpuObservation', () => {
  const withUsage = (resource_usage: Record<string, unknown> | undefined): Outcome =>
    resource_usage === undefined ? base : { ...base, resource_usage };

  it.each([
    ['no resource_usage', undefined, null],
    ['both measured, positive peak', { both_arms_measured: true, peak_job_gpu_mib: 36000 }, 36000],
    ['fractional peak', { both_arms_measured: true, peak_job_gpu_mib: 0.5 }, 0.5],
    ['one arm measured', { both_arms_measured: false, peak_job_gpu_mib: 36000 }, null],
    ['measured flag absent', { peak_job_gpu_mib: 36000 }, null],
    ['peak absent', { both_arms_measured: true }, null],
    ['peak null', { both_arms_measured: true, peak_job_gpu_mib: null }, null],
    ['peak zero', { both_arms_measured: true, peak_job_gpu_mib: 0 }, null],
    ['peak negative', { both_arms_measured: true, peak_job_gpu_mib: -1 }, null],
    ['peak NaN', { both_arms_measured: true, peak_job_gpu_mib: Number.NaN }, null],
    ['peak Infinity', { both_arms_measured: true, peak_job_gpu_mib: Number.POSITIVE_INFINITY }, null],
  ])('%s → %s', (_name, usage, expected) => {
    expect(gpuObservation(withUsage(usage))).toBe(expected);
  });

  it('reads the observation from a checked outcome', () => {
    const check = present({ ...base, resource_usage: { both_arms_measured: true, peak_job_gpu_mib: 12345 } });
    expect(check.kind === 'valid' ? gpuObservation(check.outcome) : 'not valid').toBe(12345);
  });
});

describe('outcomeProblemsOf: why an outcome is not valid, rule by rule', () => {
  it('is empty for the minimal valid outcome of the contract (SPEC §5.2)', () => {
    expect(
      outcomeProblemsOf(
        present({ job_id: 'pair-0001', infrastructure_failure: false, fatal_failure: false, arms: null }),
      ),
    ).toEqual([]);
  });

  it('names each missing flag with its path, and says there is no default', () => {
    const problems = outcomeProblemsOf(present({ job_id: 'pair-0001', arms: {} }));
    expect(problems).toEqual([
      { path: 'infrastructure_failure', message: 'is required (true or false; there is no default)' },
      { path: 'fatal_failure', message: 'is required (true or false; there is no default)' },
    ]);
    expect(problems.map(formatOutcomeProblem)).toEqual([
      'infrastructure_failure: is required (true or false; there is no default)',
      'fatal_failure: is required (true or false; there is no default)',
    ]);
  });

  it('keeps nested paths whole', () => {
    const problems = outcomeProblemsOf(
      present({ ...base, e1_attempt: { provider_incidents: [{ http_status: 'x', requires_stop: false }] } }),
    );
    expect(problems).toEqual([
      { path: 'e1_attempt.provider_incidents[0].http_status', message: 'must be an integer or null' },
    ]);
  });

  it.each([
    ['missing', { state: 'missing' } as const, 'no file at ROBOGUIDE_OUTCOME_PATH when the container exited'],
    [
      'unparseable',
      { state: 'present', bytes: encode('{"job_id":') } as const,
      'not a readable UTF-8 JSON document',
    ],
    [
      'too large',
      { state: 'too_large', sizeBytes: MAX_OUTCOME_BYTES + 1 } as const,
      `larger than ${MAX_OUTCOME_BYTES} bytes`,
    ],
  ])('names a %s file as one problem of the whole outcome', (_name, read, message) => {
    expect(outcomeProblemsOf(checkOutcome(read))).toEqual([{ path: 'outcome', message }]);
  });
});
