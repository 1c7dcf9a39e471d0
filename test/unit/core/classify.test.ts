import { describe, expect, it } from 'vitest';
import { REASON_ORDER, classify } from '../../../src/core/classify.js';
import type { ClassifyInput, HarnessFault } from '../../../src/core/classify.js';
import { pauseReasonsFor, type PauseReason } from '../../../src/core/pause-rules.js';
import type { EngineFault } from '../../../src/core/engine-fault.js';
import { checkOutcome } from '../../../src/core/outcome.js';
import type { OutcomeCheck } from '../../../src/core/outcome.js';
import type { Classification, Reason } from '../../../src/core/result.js';

const JOB = 'pair-0001';

/** The table of SPEC §5, written out independently of the implementation. */
const CLASS_REASONS: readonly (readonly [Classification, readonly Reason[]])[] = [
  ['fatal', ['fatal_failure_flag', 'job_id_mismatch']],
  [
    'harness_failure',
    [
      'lost_worker',
      'evidence_write_failed',
      'log_write_failed',
      'receipt_write_failed',
      'result_write_failed',
      'cleanup_unverified',
    ],
  ],
  ['provider_stop', ['provider_requires_stop', 'provider_status_not_allowed']],
  [
    'infrastructure_failure',
    [
      'infrastructure_failure_flag',
      'mount_refused',
      'outcome_missing',
      'outcome_unparseable',
      'outcome_invalid',
      'outcome_too_large',
      'outcome_too_deep',
      'timeout',
      'log_limit_exceeded',
      'oom_killed',
      'disk_limit_exceeded',
      'disk_unmeasurable',
      'log_incomplete',
      'terminated',
      'port_allocated',
      'nvidia_runtime_missing',
      'gpu_request_dropped',
      'image_missing',
      'image_pull_failed',
      'engine_error',
      'engine_restarted',
      'container_vanished',
      'engine_unreachable',
      'node_lost',
    ],
  ],
];
const classOf = (r: Reason): Classification => CLASS_REASONS.find(([, rs]) => rs.includes(r))![0];

const ENGINE_FAULTS: readonly (EngineFault | null)[] = [
  null,
  'port_allocated',
  'nvidia_runtime_missing',
  'gpu_request_dropped',
  'image_missing',
  'image_pull_failed',
  'engine_error',
  'engine_unavailable',
];
const HARNESS_SETS: readonly (readonly HarnessFault[])[] = [
  [],
  ['lost_worker'],
  ['log_write_failed'],
  ['receipt_write_failed'],
  ['result_write_failed'],
  ['cleanup_unverified'],
  ['cleanup_unverified', 'log_write_failed', 'lost_worker', 'result_write_failed', 'receipt_write_failed'],
];

type Incident = { http_status: number | null; requires_stop: boolean };
/** Incident lists with the provider reasons they imply when 502 is (or is not) allowed. */
const INCIDENTS: readonly { incidents: Incident[] | null; causes: (allow502: boolean) => Reason[] }[] = [
  { incidents: null, causes: () => [] },
  { incidents: [{ http_status: null, requires_stop: false }], causes: () => [] },
  {
    incidents: [{ http_status: 502, requires_stop: false }],
    causes: (a) => (a ? [] : ['provider_status_not_allowed']),
  },
  { incidents: [{ http_status: 429, requires_stop: false }], causes: () => ['provider_status_not_allowed'] },
  { incidents: [{ http_status: null, requires_stop: true }], causes: () => ['provider_requires_stop'] },
  {
    incidents: [
      { http_status: 502, requires_stop: false },
      { http_status: 429, requires_stop: true },
    ],
    causes: () => ['provider_requires_stop', 'provider_status_not_allowed'],
  },
];

interface OutcomeCase {
  readonly label: string;
  readonly check: OutcomeCheck;
  readonly causes: (allow502: boolean) => Reason[];
}

function outcomeCases(): OutcomeCase[] {
  const cases: OutcomeCase[] = [
    { label: 'missing', check: checkOutcome({ state: 'missing' }), causes: () => ['outcome_missing'] },
    {
      label: 'unparseable',
      check: checkOutcome({ state: 'present', bytes: new Uint8Array([0x7b]) }),
      causes: () => ['outcome_unparseable'],
    },
  ];
  for (const valid of [true, false]) {
    for (const infra of [false, true]) {
      for (const fatal of [false, true]) {
        for (const sameJob of [true, false]) {
          for (const inc of INCIDENTS) {
            const doc: Record<string, unknown> = {
              job_id: sameJob ? JOB : 'pair-0002',
              infrastructure_failure: infra,
              fatal_failure: fatal,
            };
            if (valid) doc.arms = { a: 'unavailable', b: 'Mission Completed' };
            if (inc.incidents !== null) doc.e1_attempt = { provider_incidents: inc.incidents };
            const check = checkOutcome({
              state: 'present',
              bytes: new TextEncoder().encode(JSON.stringify(doc)),
            });
            const fixed: Reason[] = [
              ...(valid ? [] : (['outcome_invalid'] as const)),
              ...(infra ? (['infrastructure_failure_flag'] as const) : []),
              ...(fatal ? (['fatal_failure_flag'] as const) : []),
              ...(sameJob ? [] : (['job_id_mismatch'] as const)),
            ];
            const label = `${valid ? 'valid' : 'invalid'} infra=${infra} fatal=${fatal} sameJob=${sameJob} incidents=${JSON.stringify(inc.incidents)}`;
            cases.push({ label, check, causes: (a) => [...fixed, ...inc.causes(a)] });
          }
        }
      }
    }
  }
  return cases;
}

function expectedPauses(reasons: readonly Reason[]): PauseReason[] {
  const classes = new Set(reasons.map(classOf));
  const pauses: PauseReason[] = [];
  if (classes.has('fatal')) pauses.push('fatal');
  if (classes.has('provider_stop')) pauses.push('provider');
  if (classes.has('harness_failure')) pauses.push('harness');
  return pauses;
}

/** Every mismatch between `classify` and the table for one input, as readable strings. */
function mismatches(input: ClassifyInput, causes: readonly Reason[]): string[] {
  const got = classify(input);
  const expectedSet = new Set(causes);
  const expectedClass =
    CLASS_REASONS.find(([, rs]) => rs.some((r) => expectedSet.has(r)))?.[0] ?? 'completed';
  const problems: string[] = [];
  if (got.classification !== expectedClass) problems.push(`class ${got.classification} != ${expectedClass}`);
  if (new Set(got.reasons).size !== got.reasons.length) problems.push('duplicate reasons');
  if (got.reasons.length !== expectedSet.size || got.reasons.some((r) => !expectedSet.has(r))) {
    problems.push(`reasons ${got.reasons.join(',')} != ${[...expectedSet].join(',')}`);
  }
  const positions = got.reasons.map((r) => REASON_ORDER.indexOf(r));
  if (positions.some((p, i) => i > 0 && p <= positions[i - 1]!)) problems.push('reasons out of stable order');
  if (got.reasons[0] !== undefined && classOf(got.reasons[0]) !== got.classification)
    problems.push('first reason is not the cause');
  const pauses = pauseReasonsFor(got);
  if ([...pauses].sort().join() !== expectedPauses(causes).sort().join())
    problems.push(`pauses ${pauses.join(',')}`);
  return problems;
}

describe('classify: cartesian product of observations', () => {
  it('matches the SPEC §5 table, precedence and reasons on every combination', () => {
    const failures: string[] = [];
    let cases = 0;
    for (const oc of outcomeCases()) {
      for (const allow502 of [false, true]) {
        for (const timedOut of [false, true]) {
          for (const terminated of [false, true]) {
            for (const engineFault of ENGINE_FAULTS) {
              for (const harnessFaults of HARNESS_SETS) {
                const input: ClassifyInput = {
                  jobId: JOB,
                  outcome: oc.check,
                  timedOut,
                  terminated,
                  engineFault,
                  harnessFaults,
                  allowedHttpStatuses: allow502 ? [502] : [],
                };
                const causes: Reason[] = [
                  ...oc.causes(allow502),
                  ...harnessFaults,
                  ...(timedOut ? (['timeout'] as const) : []),
                  ...(terminated ? (['terminated'] as const) : []),
                  ...(engineFault === null
                    ? []
                    : [engineFault === 'engine_unavailable' ? 'engine_error' : engineFault]),
                ];
                cases += 1;
                const problems = mismatches(input, causes);
                if (problems.length > 0 && failures.length < 20)
                  failures.push(`${oc.label} ${JSON.stringify(input)}: ${problems.join('; ')}`);
              }
            }
          }
        }
      }
    }
    expect(failures).toEqual([]);
    expect(cases).toBe(98 * 2 * 2 * 2 * 7 * 8);
  });

  it('lists every Reason word exactly once in the stable order, grouped strongest class first', () => {
    const all = CLASS_REASONS.flatMap(([, rs]) => rs);
    expect([...REASON_ORDER].sort()).toEqual([...all].sort());
    const rank = REASON_ORDER.map((r) => CLASS_REASONS.findIndex(([c]) => c === classOf(r)));
    expect(rank).toEqual([...rank].sort((a, b) => a - b));
  });
});

const valid = (extra: Record<string, unknown> = {}): OutcomeCheck =>
  checkOutcome({
    state: 'present',
    bytes: new TextEncoder().encode(
      JSON.stringify({
        job_id: JOB,
        infrastructure_failure: false,
        fatal_failure: false,
        arms: {},
        ...extra,
      }),
    ),
  });
const input = (over: Partial<ClassifyInput> = {}): ClassifyInput => ({
  jobId: JOB,
  outcome: valid(),
  timedOut: false,
  terminated: false,
  engineFault: null,
  harnessFaults: [],
  allowedHttpStatuses: [],
  ...over,
});

describe('classify: worked examples', () => {
  it('keeps ordinary verdicts completed and the raw outcome untouched', () => {
    const text =
      '{"job_id":"pair-0001","infrastructure_failure":false,"fatal_failure":false,' +
      '"arms":{"a":{"admission":"rejected","official":"unavailable"},"b":{"driver":"Mission Completed","official":false}}}';
    const check = checkOutcome({ state: 'present', bytes: new TextEncoder().encode(text) });
    expect(classify(input({ outcome: check }))).toEqual({ classification: 'completed', reasons: [] });
    expect(check.kind === 'valid' && JSON.stringify(check.raw)).toBe(text);
  });

  it('fatal flag plus unverified cleanup is fatal and names both', () => {
    const got = classify(
      input({ outcome: valid({ fatal_failure: true }), harnessFaults: ['cleanup_unverified'] }),
    );
    expect(got).toEqual({ classification: 'fatal', reasons: ['fatal_failure_flag', 'cleanup_unverified'] });
    expect(pauseReasonsFor(got)).toEqual(['fatal', 'harness']);
  });

  it('a log over its cap is an infrastructure failure named first, whatever the outcome says', () => {
    const c = classify(input({ outcome: checkOutcome({ state: 'missing' }), logLimitExceeded: true }));
    expect(c).toEqual({
      classification: 'infrastructure_failure',
      reasons: ['log_limit_exceeded', 'outcome_missing'],
    });
    expect(pauseReasonsFor(c)).toEqual([]);
  });

  it('an OOM kill and a disk over its limit are infrastructure failures of their own, named before the outcome', () => {
    const oom = classify(input({ outcome: checkOutcome({ state: 'missing' }), oomKilled: true }));
    expect(oom).toEqual({
      classification: 'infrastructure_failure',
      reasons: ['oom_killed', 'outcome_missing'],
    });
    const disk = classify(input({ diskLimitExceeded: true }));
    expect(disk).toEqual({ classification: 'infrastructure_failure', reasons: ['disk_limit_exceeded'] });
    // The pair's own doing: no pause of its own (only a streak of three pauses the batch).
    expect(pauseReasonsFor(oom)).toEqual([]);
    expect(pauseReasonsFor(disk)).toEqual([]);
    // A fatal flag still wins.
    expect(classify(input({ oomKilled: true, outcome: valid({ fatal_failure: true }) })).classification).toBe(
      'fatal',
    );
  });

  it("a log with a named gap (the engine's copy could not be read in full) is never completed: log_incomplete, infrastructure", () => {
    const c = classify(input({ logIncomplete: true }));
    expect(c).toEqual({ classification: 'infrastructure_failure', reasons: ['log_incomplete'] });
    expect(pauseReasonsFor(c)).toEqual([]);
    expect(classify(input({ logIncomplete: false }))).toEqual({ classification: 'completed', reasons: [] });
  });

  it('a timeout with a valid outcome is an infrastructure failure that keeps the outcome flags', () => {
    expect(classify(input({ timedOut: true }))).toEqual({
      classification: 'infrastructure_failure',
      reasons: ['timeout'],
    });
    expect(classify(input({ timedOut: true, outcome: valid({ infrastructure_failure: true }) }))).toEqual({
      classification: 'infrastructure_failure',
      reasons: ['timeout', 'infrastructure_failure_flag'],
    });
  });

  it('a terminated pair is an infrastructure failure unless something stronger applies', () => {
    expect(classify(input({ terminated: true, outcome: { kind: 'missing' } }))).toEqual({
      classification: 'infrastructure_failure',
      reasons: ['terminated', 'outcome_missing'],
    });
    expect(classify(input({ terminated: true, harnessFaults: ['log_write_failed'] })).classification).toBe(
      'harness_failure',
    );
  });

  it('a status the driver may continue after is not a provider stop; null statuses never are', () => {
    const incidents = {
      e1_attempt: {
        provider_incidents: [
          { http_status: 502, requires_stop: false },
          { http_status: null, requires_stop: false },
        ],
      },
    };
    expect(classify(input({ outcome: valid(incidents), allowedHttpStatuses: [502] })).classification).toBe(
      'completed',
    );
    expect(classify(input({ outcome: valid(incidents) })).reasons).toEqual(['provider_status_not_allowed']);
  });

  it('never pauses a batch for changed inputs: only the batch-level pin check does (inputs_changed)', () => {
    const fatal = classify(input({ outcome: valid({ fatal_failure: true }) }));
    expect(pauseReasonsFor(fatal)).toEqual(['fatal']);
    expect(REASON_ORDER).not.toContain('source_hash_mismatch');
  });

  it('an invalid outcome cannot hide a fatal flag or a foreign job id', () => {
    const invalid = checkOutcome({
      state: 'present',
      bytes: new TextEncoder().encode('{"job_id":"pair-0009","fatal_failure":true}'),
    });
    expect(classify(input({ outcome: invalid }))).toEqual({
      classification: 'fatal',
      reasons: ['fatal_failure_flag', 'job_id_mismatch', 'outcome_invalid'],
    });
  });

  it('does not depend on the order of harness faults and drops duplicates', () => {
    const a = classify(input({ harnessFaults: ['lost_worker', 'cleanup_unverified', 'lost_worker'] }));
    const b = classify(input({ harnessFaults: ['cleanup_unverified', 'lost_worker'] }));
    expect(a).toEqual(b);
    expect(a.reasons).toEqual(['lost_worker', 'cleanup_unverified']);
  });

  it.each([
    [{ classification: 'completed', reasons: [] }, []],
    [{ classification: 'infrastructure_failure', reasons: ['timeout', 'outcome_missing'] }, []],
    [{ classification: 'provider_stop', reasons: ['provider_requires_stop', 'engine_error'] }, ['provider']],
    [
      { classification: 'harness_failure', reasons: ['lost_worker', 'provider_status_not_allowed'] },
      ['provider', 'harness'],
    ],
    [{ classification: 'fatal', reasons: ['job_id_mismatch'] }, ['fatal']],
  ] as const)('pauseReasonsFor(%j) → %j', (classified, pauses) => {
    expect(
      pauseReasonsFor({ classification: classified.classification, reasons: [...classified.reasons] }),
    ).toEqual(pauses);
  });
});
