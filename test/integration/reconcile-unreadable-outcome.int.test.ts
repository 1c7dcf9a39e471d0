/**
 * One meaning for "the outcome's digest now" (issue 15): an outcome copy that cannot be read (here a symlink, which
 * the reader never follows) was recorded in result.json as no outcome (`outcome_sha256: null`). Reconciliation in
 * process (the supervisor, `pair run`) counts it as missing and commits; the `reconcile` command must reach the same
 * verdict from the same evidence, not hold the slot as `evidence_missing` forever. The built CLI; the engine only
 * answers that the container is gone.
 */
import { mkdtemp, rm, symlink, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import type { ResultRecord } from '../../src/core/result.js';
import { noDocker } from '../support/docker.js';
import { buildFinishedPair } from '../support/finished-pair.js';
import { cli } from '../support/cli.js';

let work: string;

describe.skipIf(noDocker)('reconcile: an outcome copy that cannot be read', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-unreadable-outcome-'));
  });
  afterAll(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it('commits through the CLI as it does in process: result.json recorded no outcome, and there is none to read', async () => {
    const registryPath = join(work, 'registry.db');
    const output = join(work, 'batch-1');
    const registry = SqliteCapacityRegistry.open({ path: registryPath });
    let reservationId: string;
    try {
      const pair = await buildFinishedPair({
        root: output,
        outcomeDir: join(work, 'out'),
        registry,
        writeResult: false,
      });
      reservationId = pair.reservationId;
      // The driver left a symlink where its outcome belongs: read with O_NOFOLLOW, it is unreadable (ELOOP).
      await writeFile(join(work, 'elsewhere.json'), '{"job_id":"pair-0001"}');
      await unlink(pair.outcomePath);
      await symlink(join(work, 'elsewhere.json'), pair.outcomePath);
      const result: ResultRecord = {
        ...pair.result,
        classification: 'infrastructure_failure',
        reasons: ['outcome_unparseable'],
        outcome: null,
        outcome_sha256: null,
      };
      await pair.store.writeJsonAtomic(`${pair.jobRel}/result.json`, result);
    } finally {
      await registry.close();
    }

    const run = await cli([
      'reconcile',
      '--output',
      output,
      '--execute',
      '--registry',
      registryPath,
      '--json',
    ]);
    expect(run.stderr + run.stdout).not.toContain('evidence_missing');
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const report = (JSON.parse(run.stdout) as { reports: { kind: string }[] }).reports;
    expect(report.map((r) => r.kind)).toEqual(['committed']);

    const after = SqliteCapacityRegistry.open({ path: registryPath });
    try {
      expect((await after.reservation(reservationId))?.state).toBe('released');
    } finally {
      await after.close();
    }
  });
});
