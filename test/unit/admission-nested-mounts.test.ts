import { describe, expect, it } from 'vitest';
import {
  decideAdmission,
  evidenceSource,
  nestedMount,
  requestedSources,
} from '../../src/core/admission-rule.js';

const held = (source: string) => ({ source, batchId: 'b-held' });

describe('the host-wide record of writable sources and running evidence (nestedMount)', () => {
  it('a writable source inside, or holding, a held one is refused; an equal one is allowed', () => {
    expect(nestedMount(['/w/a/sub'], [held('/w/a')])).toMatchObject({
      source: '/w/a/sub',
      heldSource: '/w/a',
    });
    expect(nestedMount(['/w'], [held('/w/a')])).toMatchObject({ source: '/w', heldSource: '/w/a' });
    expect(nestedMount(['/w/a'], [held('/w/a')])).toBeNull();
    expect(nestedMount(['/w/ab'], [held('/w/a')])).toBeNull();
  });

  it("a running pair's evidence is held exclusively: equal, inside or holding, named as evidence", () => {
    const evidence = held(evidenceSource('/out/D/jobs/j1'));
    for (const asked of ['/out/D/jobs/j1', '/out/D/jobs/j1/outcome', '/out/D', '/out/D/jobs/j1/'])
      expect(nestedMount([asked], [evidence]), asked).toMatchObject({
        heldSource: "/out/D/jobs/j1 (a running pair's evidence)",
      });
    expect(nestedMount(['/out/D/jobs/j10'], [evidence])).toBeNull();
    // Asked as evidence against a held writable source: the same rule from the other side.
    expect(nestedMount([evidenceSource('/w/a')], [held('/w/a')])).not.toBeNull();
  });

  it('requestedSources records each source once, normalized, the evidence marked and kept apart', () => {
    expect(
      requestedSources({ writableMounts: ['/w/a/', '/w//a', '/w/b'], evidenceFolder: '/out/D/jobs/j1/' }),
    ).toEqual(['/out/D/jobs/j1/', '/w/a', '/w/b']);
    expect(requestedSources({})).toEqual([]);
  });

  it("a read-only source is not held, but may not be, lie inside or hold a running pair's evidence", () => {
    const facts = {
      existing: null,
      node: 'n1',
      budget: { maxReservations: 10, gpuMib: null },
      held: { count: 1, gpuMib: 0 },
      portHolders: [],
      heldMounts: [held(evidenceSource('/out/D/jobs/j1')), held('/w/a')],
    };
    const ask = { batchId: 'b', jobId: 's1', gpuMib: 0 };
    expect(decideAdmission({ ...ask, readOnlyMounts: ['/out/D/jobs/j1/outcome'] }, facts)).toMatchObject({
      kind: 'refused',
      reason: 'mount_nested',
    });
    // A read-only view of another container's writable source stays allowed (only evidence is exclusive).
    expect(decideAdmission({ ...ask, readOnlyMounts: ['/w/a/sub'] }, facts)).toEqual({ kind: 'admit' });
  });
});
