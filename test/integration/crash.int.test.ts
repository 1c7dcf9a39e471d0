/**
 * Crash tests of the batch supervisor (SPEC §4–§5): SIGKILL the supervisor at every failpoint (1st and 2nd
 * passage) and at seeded random moments, resume until the batch drains, then check that no pair ran twice,
 * no receipt or result is torn, no labelled container is left, the registry holds nothing it should have
 * released, and SUMMARY.json accounts for every job. The CLI runs as a child process against dist/.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { noDocker, sweep } from '../support/docker.js';
import {
  batchIdOf,
  checkInvariants,
  ranButLost,
  resumeArgs,
  resumeUntilDrained,
  runCli,
  seededRandom,
  startArgs,
  writeCrashFixture,
  type CrashFixture,
  type CrashJob,
} from '../support/crash-batch.js';

const FAILPOINTS = ['after_reserve', 'after_claim', 'after_container_created', 'before_result', 'after_result', 'after_reconcile', 'before_drain_check'] as const;

/**
 * Scenarios with a known, accepted violation pattern (none now). The after_result case used to leave the
 * reservation held forever (resume only recovered claims without a result); fixed by reconciling finished-but-held
 * pairs at supervisor start.
 */
const KNOWN_BUGS: Readonly<Record<string, RegExp>> = {};

const tally = { killPoints: 0, notFired: 0, runs: 0, violations: [] as string[], known: [] as string[], ranButLost: [] as string[] };
const roots: string[] = [];
const batches: string[] = [];

function fourPairs(): CrashJob[] {
  return [
    { id: 'p1', actions: ['numbered=2', 'outcome=completed'], expected: 'completed' },
    { id: 'p2', actions: ['numbered=2', 'outcome=infra'], expected: 'infrastructure_failure' },
    { id: 'p3', actions: ['numbered=2', 'arm=hold', 'outcome=completed'], expected: 'completed' },
    { id: 'p4', actions: ['numbered=2', 'outcome=infra'], expected: 'infrastructure_failure' },
  ];
}

async function fixture(label: string, jobs: readonly CrashJob[]): Promise<CrashFixture> {
  const root = await mkdtemp(join(tmpdir(), `rg-crash-${label}-`));
  roots.push(root);
  return writeCrashFixture(root, jobs);
}

async function record(label: string, fx: CrashFixture): Promise<string[]> {
  const batchId = await batchIdOf(fx);
  if (batchId && !batches.includes(batchId)) batches.push(batchId);
  tally.ranButLost.push(...(await ranButLost(fx)).map((id) => `${label}: ${id}`));
  const found = (await checkInvariants(fx)).map((s) => `${label}: ${s}`);
  const known = KNOWN_BUGS[label.split('#')[0] ?? ''];
  tally.known.push(...found.filter((f) => known?.test(f) === true));
  const fresh = found.filter((f) => known?.test(f) !== true);
  tally.violations.push(...fresh);
  return fresh;
}

describe.skipIf(noDocker)('batch supervisor crash recovery', () => {
  afterEach(async () => {
    for (const id of batches.splice(0)) await sweep({ 'roboguide.batch': id });
  });
  afterAll(async () => {
    console.log(
      `crash tests: ${tally.killPoints} kill points, ${tally.notFired} failpoint combos that never fired, ${tally.runs} CLI runs, ` +
        `${tally.violations.length} violations, ${tally.known.length} known-bug hits, ${tally.ranButLost.length} ran-but-lost_worker notes`,
    );
    for (const v of tally.violations) console.log(`  VIOLATION ${v}`);
    for (const v of tally.known) console.log(`  KNOWN BUG ${v}`);
    for (const v of tally.ranButLost) console.log(`  NOTE driver ran, result lost_worker: ${v}`);
    if (process.env['KEEP_CRASH_DIRS'] !== '1') await Promise.all(roots.map((r) => rm(r, { recursive: true, force: true })));
  });

  describe.each(FAILPOINTS)('failpoint %s', (name) => {
    it.each([1, 2])(`SIGKILL at ${name}#%i, then resume: every invariant holds`, async (nth) => {
      const label = `${name}#${nth}`;
      const fx = await fixture(`${name}-${nth}`, fourPairs());
      const first = await runCli(startArgs(fx), { env: { ROBOGUIDE_FAILPOINT: label } });
      tally.runs++;
      const batchId = await batchIdOf(fx);
      if (batchId) batches.push(batchId); // swept after the test even when an assertion below fails
      // Every point is passed at least twice in a 4-pair batch, except the drain check (once per run).
      const mustFire = !(name === 'before_drain_check' && nth === 2);
      expect(first.signal === 'SIGKILL', `${label}: the failpoint ${mustFire ? 'did not fire' : 'fired unexpectedly'}`).toBe(mustFire);
      if (first.signal === 'SIGKILL') {
        tally.killPoints++;
        const drain = await resumeUntilDrained(fx, 6);
        tally.runs += drain.resumes;
        expect(drain.lastState, `${label}: batch did not drain`).toBe('drained');
      } else {
        // The point is never passed this often in a 4-pair batch: the run must simply have drained.
        expect(first.code, `${label}: start failed: ${first.stderr.slice(-1500)}`).toBe(0);
        tally.notFired++;
      }
      const knownBefore = tally.known.length;
      expect(await record(label, fx)).toEqual([]);
      if (KNOWN_BUGS[name] && first.signal === 'SIGKILL') {
        expect(tally.known.length - knownBefore, `known bug at ${name} no longer reproduces: remove it from KNOWN_BUGS`).toBeGreaterThan(0);
      }
    });
  });

  it('random SIGKILLs of a 30-pair batch (seeded), resumed until drained: every invariant holds', async () => {
    const seed = Number(process.env['CRASH_SEED'] ?? 20261202);
    const random = seededRandom(seed);
    const outcomes = ['completed', 'completed', 'infra'] as const;
    const jobs: CrashJob[] = Array.from({ length: 30 }, (_, i) => {
      const outcome = outcomes[i % outcomes.length] ?? 'completed';
      return {
        id: `r${String(i + 1).padStart(2, '0')}`,
        actions: ['numbered=2', `outcome=${outcome}`],
        expected: outcome === 'infra' ? 'infrastructure_failure' : 'completed',
      };
    });
    const fx = await fixture('random', jobs);
    const kills: number[] = [];
    let args = startArgs(fx);
    for (let round = 0; round < 4; round++) {
      const delayMs = Math.floor(200 + random() * 1_800);
      const run = await runCli(args, { killAfterSupervisingMs: delayMs, output: fx.output });
      tally.runs++;
      if (run.killedByTest && run.signal === 'SIGKILL') {
        kills.push(delayMs);
        tally.killPoints++;
      } else {
        expect(run.code, `round ${round}: ${run.stderr.slice(-1500)}`).toBe(0);
      }
      args = resumeArgs(fx);
    }
    const drain = await resumeUntilDrained(fx, 12);
    tally.runs += drain.resumes;
    console.log(`random crash test (seed ${seed}): ${kills.length} kills at ${kills.join(',')} ms after supervising, ${drain.resumes} final resume(s)`);
    expect(kills.length).toBeGreaterThan(0);
    expect(drain.lastState).toBe('drained');
    expect(await record(`random seed ${seed}`, fx)).toEqual([]);
  });
});
