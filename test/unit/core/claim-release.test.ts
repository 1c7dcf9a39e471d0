/** The one rule for a slot released outside terminal reconciliation (src/core/claim-release.ts). */
import { describe, expect, it } from 'vitest';
import { unstartedClaimDecision, type UnstartedClaimFacts } from '../../../src/core/claim-release.js';

const none: UnstartedClaimFacts = {
  containerId: null,
  labelled: 0,
  receipt: 'absent',
  resumeFinishesClaim: true,
};

describe('unstartedClaimDecision', () => {
  it('no receipt and no container of the claim: release (a batch no longer waits for resume)', () => {
    expect(unstartedClaimDecision(none)).toEqual({ kind: 'release' });
  });

  it('a container on the receipt, or one with the claim label: keep (only reconciliation releases it)', () => {
    expect(unstartedClaimDecision({ ...none, containerId: 'c1' })).toEqual({
      kind: 'keep',
      why: 'container_exists',
    });
    expect(unstartedClaimDecision({ ...none, labelled: 1 })).toEqual({
      kind: 'keep',
      why: 'container_exists',
    });
    expect(unstartedClaimDecision({ ...none, containerId: 'c1', resumeFinishesClaim: false })).toEqual({
      kind: 'keep',
      why: 'container_exists',
    });
  });

  it('an engine that could not be asked: keep (a create may have been sent)', () => {
    expect(unstartedClaimDecision({ ...none, labelled: null })).toEqual({
      kind: 'keep',
      why: 'container_unknown',
    });
  });

  it('a standing claim without a container: kept for a batch resume, released for `pair run`', () => {
    const standing = { ...none, receipt: 'published' } as const;
    expect(unstartedClaimDecision(standing)).toEqual({ kind: 'keep', why: 'resume_finishes' });
    expect(unstartedClaimDecision({ ...standing, resumeFinishesClaim: false })).toEqual({ kind: 'release' });
  });
});
