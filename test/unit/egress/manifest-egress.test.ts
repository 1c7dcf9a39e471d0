import { describe, expect, it } from 'vitest';
import type { Issue } from '../../../src/core/errors.js';
import { jobEgress, parseManifest } from '../../../src/core/manifest/parse.js';
import { MANIFEST_SCHEMA_ID } from '../../../src/core/manifest/constants.js';
import { buildReceipt } from '../../../src/core/receipt.js';

function manifest(job: Record<string, unknown> = {}, top: Record<string, unknown> = {}) {
  return {
    schema: MANIFEST_SCHEMA_ID,
    image: 'pair-driver:1',
    jobs: [{ job_id: 'p1', argv: ['/run'], cwd: '/work', outcome_path: '/out/p1.json', ...job }],
    ...top,
  };
}

function issuesOf(value: unknown): Issue[] {
  const parsed = parseManifest(JSON.stringify(value));
  if (parsed.ok) throw new Error('expected the manifest to be rejected');
  return parsed.issues;
}

describe('manifest egress', () => {
  it('takes a job policy and a manifest default; the job wins', () => {
    const parsed = parseManifest(
      JSON.stringify(
        manifest({ egress: { mode: 'allowlist', allow: ['*.anthropic.com'] } }, { egress: { mode: 'none' } }),
      ),
    );
    if (!parsed.ok) throw new Error(JSON.stringify(parsed.issues));
    const job = parsed.manifest.jobs[0];
    if (job === undefined) throw new Error('no job');
    expect(jobEgress(parsed.manifest, job)).toEqual({ mode: 'allowlist', allow: ['*.anthropic.com'] });
    expect(jobEgress(parsed.manifest, { ...job, egress: undefined })).toEqual({ mode: 'none' });
  });

  it('refuses bad policies naming the field and the rule', () => {
    expect(issuesOf(manifest({ egress: { mode: 'closed' } }))).toContainEqual({
      path: 'jobs[0].egress.mode',
      rule: expect.stringMatching(/"none", "open" or "allowlist"/),
    });
    expect(issuesOf(manifest({ egress: { mode: 'allowlist', allow: ['ok.com', '*.com'] } }))).toContainEqual({
      path: 'jobs[0].egress.allow[1]',
      rule: expect.stringMatching(/two labels/),
    });
    expect(
      issuesOf(manifest({ egress: { mode: 'allowlist', allow: ['a.com'], methods: ['FETCH'] } })),
    ).toContainEqual({
      path: 'jobs[0].egress.methods[0]',
      rule: expect.stringMatching(/one of/),
    });
    expect(issuesOf(manifest({ network: 'none', egress: { mode: 'open' } }))).toContainEqual({
      path: 'jobs[0].egress',
      rule: expect.stringMatching(/network "none"/),
    });
    expect(issuesOf(manifest({ egress: { mode: 'open', surprise: 1 } })).length).toBeGreaterThan(0);
  });

  it('freezes the effective policy into the receipt: network none/bridge map onto none/open', () => {
    const base = {
      batchId: 'b',
      jobId: 'p1',
      claimId: 'c'.repeat(12),
      claimedAt: new Date(0),
      supervisor: { pid: 1, start_time: '1', boot_id: null, hostname: 'h' } as never,
      reservationId: 'r',
      image: 'i',
      outcomePath: '/out/o.json',
      sourceSha256: {},
      codeVersion: 't',
      runtime: 'runc',
    };
    expect(buildReceipt({ ...base, network: 'bridge' })).toMatchObject({
      network: { choice: 'bridge', engine_network: 'roboguide-pairs' },
      egress: { mode: 'open' },
    });
    expect(buildReceipt({ ...base, network: 'none' }).egress).toEqual({ mode: 'none' });
    expect(
      buildReceipt({
        ...base,
        network: 'bridge',
        egress: { mode: 'allowlist', allow: ['A.com:8443'], methods: ['get'] },
      }),
    ).toMatchObject({
      network: { choice: 'allowlist', engine_network: 'roboguide-egress' },
      egress: { mode: 'allowlist', allow: ['a.com:8443'], methods: ['GET'] },
    });
  });
});
