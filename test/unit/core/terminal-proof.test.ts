import { describe, expect, it } from 'vitest';
import { RECEIPT_SCHEMA, type Receipt } from '../../../src/core/receipt.js';
import { RESULT_SCHEMA, type ResultRecord } from '../../../src/core/result.js';
import {
  TooDeepError,
  buildTerminalProof,
  canonicalJson,
  proofDigestInput,
  receiptProblems,
  resultProblems,
  type TerminalProofInput,
} from '../../../src/core/terminal-proof.js';

const OUTCOME_SHA = 'b'.repeat(64);

const receipt: Receipt = {
  schema: RECEIPT_SCHEMA,
  batch_id: 'batch-A',
  job_id: 'pair-0001',
  attempt: 1,
  claim_id: 'claim-1',
  claimed_at: '2025-01-01T00:00:00.000Z',
  host_boot_id: 'boot-1',
  supervisor: { pid: 1, start_ticks: '1', boot_id: 'boot-1' },
  reservation_id: 'res-1',
  image: 'pair-driver:1',
  outcome_path: '/out/pair-0001.json',
  source_sha256: { '/abs/z.py': 'c'.repeat(64), '/abs/a.py': 'd'.repeat(64) },
  code_version: '0.1.0',
  container_id: 'c-1',
  container_name: 'roboguide-pair-0001-claim-1',
};

const result: ResultRecord = {
  schema: RESULT_SCHEMA,
  job_id: 'pair-0001',
  batch_id: 'batch-A',
  claim_id: 'claim-1',
  classification: 'completed',
  reasons: [],
  outcome: { job_id: 'pair-0001', arms: {} },
  outcome_redactions: 0,
  outcome_sha256: OUTCOME_SHA,
  container: { id: 'c-1', exit_code: 0, timed_out: false, oom_killed: false },
  logs: { stdout: { bytes: 10, closed: true }, stderr: { bytes: 3, closed: false } },
  sessions: { files: 0, bytes: 0, refusals: [] },
  provider_failure: null,
  provider_failure_error_kind: null,
  cleanup: { removed: true, verified_absent: true, attempts: 1 },
  engine_error: null,
  started_at: '2025-01-01T00:00:01.000Z',
  finished_at: '2025-01-01T00:05:00.000Z',
};

const input: TerminalProofInput = {
  receipt,
  result,
  currentOutcomeSha256: OUTCOME_SHA,
  outcomeState: 'present',
  containerPresent: false,
};

function holdOf(overrides: Partial<TerminalProofInput>): { reason: string; detail: string } {
  const decision = buildTerminalProof({ ...input, ...overrides });
  if (decision.kind !== 'hold') throw new Error('expected a hold');
  return decision;
}

describe('buildTerminalProof', () => {
  it('builds the proof from consistent evidence', () => {
    const decision = buildTerminalProof(input);
    expect(decision.kind).toBe('proof');
    if (decision.kind !== 'proof') return;
    expect(decision.proof).toMatchObject({
      schema: 'roboguide.terminal_proof/v1',
      batch_id: 'batch-A',
      job_id: 'pair-0001',
      run_id: 'claim-1',
      reservation_id: 'res-1',
      launch: {
        claimed_at: receipt.claimed_at,
        host_boot_id: 'boot-1',
        container_id: 'c-1',
        image: 'pair-driver:1',
        code_version: '0.1.0',
      },
      classification: 'completed',
      outcome_sha256: OUTCOME_SHA,
      exit_code: 0,
      logs: { stdout_closed: true, stderr_closed: false, stdout_bytes: 10, stderr_bytes: 3 },
      cleanup: { verified_absent: true, verified_by: 'pair_cleanup' },
    });
  });

  it('is deterministic: key order of the evidence does not change the digest input', () => {
    const shuffled = JSON.parse(
      JSON.stringify({
        ...receipt,
        source_sha256: { '/abs/a.py': 'd'.repeat(64), '/abs/z.py': 'c'.repeat(64) },
      }),
    ) as Receipt;
    const reversed = Object.fromEntries(Object.entries(shuffled).reverse()) as Receipt;
    const a = buildTerminalProof(input);
    const b = buildTerminalProof({ ...input, receipt: reversed });
    if (a.kind !== 'proof' || b.kind !== 'proof') throw new Error('expected proofs');
    expect(proofDigestInput(a.proof)).toBe(proofDigestInput(b.proof));
    expect(proofDigestInput(a.proof)).not.toMatch(/\s/);
    const changed = buildTerminalProof({ ...input, result: { ...result, reasons: ['timeout'] } });
    if (changed.kind !== 'proof') throw new Error('expected a proof');
    expect(proofDigestInput(changed.proof)).not.toBe(proofDigestInput(a.proof));
  });

  it.each([
    ['batch_id', { result: { ...result, batch_id: 'batch-B' } }],
    ['job_id', { result: { ...result, job_id: 'pair-0002' } }],
    ['claim_id', { result: { ...result, claim_id: 'claim-2' } }],
    ['container', { result: { ...result, container: { ...result.container, id: 'c-2' } } }],
    ['reservation id', { receipt: { ...receipt, reservation_id: null } }],
  ] as const)('holds as contradictory when the %s disagrees or is missing', (_what, overrides) => {
    expect(holdOf(overrides).reason).toBe('evidence_contradictory');
  });

  it('holds as contradictory when the result has an outcome digest but the file is gone', () => {
    const hold = holdOf({ outcomeState: 'missing', currentOutcomeSha256: null });
    expect(hold.reason).toBe('evidence_contradictory');
    expect(hold.detail).toContain('gone');
  });

  it('holds as outcome_changed when the digest now differs, or an outcome appeared later', () => {
    expect(holdOf({ currentOutcomeSha256: 'e'.repeat(64) }).reason).toBe('outcome_changed');
    const missingThen = {
      ...result,
      classification: 'infrastructure_failure',
      reasons: ['outcome_missing'],
      outcome: null,
      outcome_sha256: null,
    } as const;
    expect(holdOf({ result: missingThen }).reason).toBe('outcome_changed');
  });

  it('holds as contradictory when a completed result records no outcome', () => {
    const hold = holdOf({ result: { ...result, outcome: null } });
    expect(hold.reason).toBe('evidence_contradictory');
  });

  it('holds while the container is present; proves with the reconciler as verifier once it is gone', () => {
    expect(holdOf({ containerPresent: true }).reason).toBe('container_present');
    const unverified = { ...result, cleanup: { removed: false, verified_absent: false, attempts: 3 } };
    expect(holdOf({ result: unverified, containerPresent: true }).reason).toBe('container_present');
    const decision = buildTerminalProof({ ...input, result: unverified });
    expect(decision.kind === 'proof' && decision.proof.cleanup).toEqual({
      verified_absent: true,
      verified_by: 'reconciler',
    });
  });

  it('proves a failure without an outcome when the file is still missing', () => {
    const missing = {
      ...result,
      classification: 'infrastructure_failure',
      reasons: ['outcome_missing'],
      outcome: null,
      outcome_sha256: null,
    } as const;
    const decision = buildTerminalProof({
      ...input,
      result: missing,
      outcomeState: 'missing',
      currentOutcomeSha256: null,
    });
    expect(decision.kind === 'proof' && decision.proof.outcome_sha256).toBeNull();
    expect(decision.kind === 'proof' && decision.proof.classification).toBe('infrastructure_failure');
  });
});

describe('canonicalJson', () => {
  it('throws its typed error, not a stack overflow, for a value nested too deeply', () => {
    let value: unknown = 0;
    for (let i = 0; i < 5_000; i++) value = { v: value };
    expect(() => canonicalJson(value)).toThrow(TooDeepError);
  });

  it('sorts keys at every depth and keeps array order', () => {
    expect(canonicalJson({ b: [3, { z: 1, a: null }], a: 'x', u: undefined })).toBe(
      '{"a":"x","b":[3,{"a":null,"z":1}]}',
    );
  });
});

describe('evidence shape checks', () => {
  it('accepts the real shapes', () => {
    expect(receiptProblems(receipt)).toEqual([]);
    expect(resultProblems(result)).toEqual([]);
  });

  it('names each wrong or missing field', () => {
    expect(receiptProblems({ ...receipt, claim_id: 7, source_sha256: { x: 1 } })).toEqual([
      'receipt.claim_id',
      'receipt.source_sha256',
    ]);
    const { logs: _logs, ...noLogs } = result;
    expect(
      resultProblems({ ...noLogs, classification: 'great', container: { id: 'c', exit_code: 1.5 } }),
    ).toEqual(['result.classification', 'result.logs', 'result.container.exit_code']);
    expect(resultProblems([])).toEqual(['result is not a JSON object']);
  });
});
