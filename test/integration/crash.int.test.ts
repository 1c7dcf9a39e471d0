/**
 * Crash tests of the batch supervisor (SPEC §4–§5). Systematic: a clean traced run enumerates every kill point
 * of a 5-pair batch (each write site — evidence files, journal records, log files, registry transactions — and
 * each supervisor step, × every occurrence), with one worker and with two; each chosen point SIGKILLs a `start`,
 * then `resume` runs until the batch drains. Random: seeded SIGKILLs of supervisors of 8-pair two-worker batches.
 * After each: no pair ran twice (driver `count`), no receipt or result torn or missing, every finished pair's
 * stdout log whole and without duplicates, no labelled container left, no slot leaked, SUMMARY.json accounts for
 * every job. CI runs a seeded subset; `npm run test:crash -- --full` (ROBOGUIDE_CRASH_FULL=1) runs all of it.
 * The CLI runs as a child process against dist/ (or ROBOGUIDE_CRASH_BIN, a frozen copy for a long run).
 */
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { noDocker, sweep } from '../support/docker.js';
import {
  batchIdOf,
  checkInvariants,
  failpointCounts,
  ranButLost,
  resumeArgs,
  resumeUntilDrained,
  runCli,
  seededRandom,
  startArgs,
  TWO_WORKERS,
  writeCrashFixture,
  type CrashFixture,
  type CrashJob,
} from '../support/crash-batch.js';

const FULL = process.env['ROBOGUIDE_CRASH_FULL'] === '1';
const SEED = Number(process.env['CRASH_SEED'] ?? 20261202);
const CONCURRENCY = Number(process.env['CRASH_CONCURRENCY'] ?? (FULL ? 3 : 2));
/** CI: this many kill sites per worker mode, each at one seeded occurrence. Full: every site × every occurrence. */
const CI_SITES_PER_MODE = 5;
const RANDOM_KILLS = Number(process.env['CRASH_RANDOM_KILLS'] ?? (FULL ? 100 : 5));
const FULL_MIN_POINTS = 300;
/** `CRASH_PARTS=1w,2w,random` runs only those parts (a long full run split over processes); default all. */
const PARTS = new Set((process.env['CRASH_PARTS'] ?? '1w,2w,random').split(','));
/** `CRASH_SITES=site,site` runs every occurrence of just those kill sites (to re-check points after a fix). */
const ONLY_SITES = process.env['CRASH_SITES'] ? new Set(process.env['CRASH_SITES'].split(',')) : null;

/**
 * Every kill point a 5-pair batch passes (src/app/ports/failpoints.ts). The trace must list exactly these: a new write
 * site gets a failpoint and a place here, or this test fails.
 */
const KILL_SITES = [
  'publish:batch.json:temp_written',
  'publish:batch.json:linked',
  'write:manifest.json:temp_written',
  'write:manifest.json:renamed',
  'journal:batch_created',
  'registry:migrate:in_txn',
  'registry:migrate:committed',
  'registry:acquire_lease:in_txn',
  'registry:acquire_lease:committed',
  'write:supervisor.json:temp_written',
  'write:supervisor.json:renamed',
  'journal:supervisor_started',
  'write:status.json:temp_written',
  'write:status.json:renamed',
  'journal:source_check',
  'registry:admit:in_txn',
  'registry:admit:committed',
  'after_reserve',
  'publish:receipt.json:temp_written',
  'publish:receipt.json:linked',
  'after_claim',
  'journal:claimed',
  // Claimed, no container yet (docs/claimed-pair-design.md): resume releases nothing until it reconciles the claim.
  'before_create',
  'write:receipt.json:temp_written',
  'write:receipt.json:renamed',
  'registry:attach_container:in_txn',
  'registry:attach_container:committed',
  'journal:container_created',
  'after_container_created',
  'log_opened:stdout.log',
  'log_opened:stderr.log',
  'before_result',
  'write:result.json:temp_written',
  'write:result.json:renamed',
  'after_result',
  'journal:pair_finished',
  'write:terminal-proof.json:temp_written',
  'write:terminal-proof.json:renamed',
  'registry:commit_terminal:in_txn',
  'registry:commit_terminal:committed',
  'after_reconcile',
  'journal:reconciled',
  'before_drain_check',
  'journal:supervisor_exited',
  'write:SUMMARY.json:temp_written',
  'write:SUMMARY.json:renamed',
  'registry:release_lease:in_txn',
  'registry:release_lease:committed',
  'write:report.html:temp_written',
  'write:report.html:renamed',
  'log_drain:begin',
  'log_drain:done',
  'remove:requested',
].sort();

interface Mode {
  readonly name: '1w' | '2w';
  readonly capacity: object;
}
const MODES: readonly Mode[] = [
  { name: '1w', capacity: { max_workers: 1 } },
  { name: '2w', capacity: TWO_WORKERS },
];

const tally = {
  killPoints: 0,
  notFired: 0,
  runs: 0,
  randomKills: 0,
  violations: [] as string[],
  ranButLost: [] as string[],
};
const roots: string[] = [];
const batches = new Set<string>();
const counts = new Map<Mode['name'], Map<string, number>>();

function fivePairs(): CrashJob[] {
  return [
    // The first completed pair reports a GPU peak: with TWO_WORKERS the rest may run two at a time.
    { id: 'p1', actions: ['numbered=2', 'usage=1000', 'outcome=completed'], expected: 'completed' },
    { id: 'p2', actions: ['numbered=2', 'outcome=infra'], expected: 'infrastructure_failure' },
    { id: 'p3', actions: ['numbered=2', 'arm=hold', 'outcome=completed'], expected: 'completed' },
    { id: 'p4', actions: ['numbered=2', 'outcome=infra'], expected: 'infrastructure_failure' },
    { id: 'p5', actions: ['numbered=2', 'outcome=completed'], expected: 'completed' },
  ];
}

async function fixture(label: string, jobs: readonly CrashJob[], capacity: object): Promise<CrashFixture> {
  const root = await mkdtemp(join(tmpdir(), `rg-crash-${label.replace(/[^a-zA-Z0-9_-]/g, '_')}-`));
  roots.push(root);
  return writeCrashFixture(root, jobs, capacity);
}

async function remember(fx: CrashFixture): Promise<void> {
  const id = await batchIdOf(fx);
  if (id) batches.add(id);
}

async function pool<T>(items: readonly T[], width: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.max(1, width) }, async () => {
      while (next < items.length) await work(items[next++]!);
    }),
  );
}

/** Slots of a registry that nobody should have written to (a batch that was never fully created). */
function reservationsIn(registry: string): number {
  if (!existsSync(registry)) return 0;
  const db = new DatabaseSync(registry, { readOnly: true });
  try {
    return Number((db.prepare('SELECT COUNT(*) AS n FROM reservations').get() as { n: number }).n);
  } catch {
    return 0; // no schema yet: nothing was reserved
  } finally {
    db.close();
  }
}

/** One systematic kill point: SIGKILL `start` at `site#nth`, recover, check. Returns the violations. */
async function killPoint(mode: Mode, site: string, nth: number): Promise<string[]> {
  const label = `${mode.name} ${site}#${nth}`;
  const fx = await fixture(`${mode.name}-${site}-${nth}`, fivePairs(), mode.capacity);
  const first = await runCli(startArgs(fx), { env: { ROBOGUIDE_FAILPOINT: `${site}#${nth}` } });
  tally.runs++;
  await remember(fx);
  const v: string[] = [];
  let checked = fx;
  if (first.signal !== 'SIGKILL') {
    if (first.code !== 0)
      return [
        `${label}: start failed without the kill (code ${String(first.code)}): ${first.stderr.slice(-800)}`,
      ];
    tally.notFired++; // this run passed the point fewer times than the trace did: it simply drained
  } else if (!existsSync(join(fx.output, 'batch.json')) || !existsSync(join(fx.output, 'manifest.json'))) {
    // Killed while the batch was being created: resume refuses plainly, nothing was reserved or run, and the
    // operator's recourse (start again into a new directory) works.
    tally.killPoints++;
    const resume = await runCli(resumeArgs(fx));
    tally.runs++;
    if (resume.code !== 2)
      v.push(`${label}: resume of a half-created batch exited ${String(resume.code)}, expected 2`);
    if (reservationsIn(fx.registry) > 0) v.push(`${label}: a half-created batch holds reservations`);
    checked = { ...fx, output: join(fx.root, 'D2') };
    const again = await runCli(startArgs(checked));
    tally.runs++;
    await remember(checked);
    if (again.code !== 0)
      v.push(`${label}: start again failed (code ${String(again.code)}): ${again.stderr.slice(-800)}`);
  } else {
    tally.killPoints++;
    const drain = await resumeUntilDrained(fx, 6);
    tally.runs += drain.resumes;
    if (drain.lastState !== 'drained') v.push(`${label}: batch did not drain (${String(drain.lastState)})`);
  }
  tally.ranButLost.push(...(await ranButLost(checked)).map((id) => `${label}: ${id}`));
  v.push(...(await checkInvariants(checked)).map((s) => `${label}: ${s}`));
  const id = await batchIdOf(checked);
  if (id) await sweep({ 'roboguide.batch': id });
  return v;
}

/** The kill points to run for one mode: all of them (full), or a seeded subset of sites (CI). */
function pointsFor(mode: Mode): { site: string; nth: number }[] {
  const passes = counts.get(mode.name) ?? new Map<string, number>();
  const all = KILL_SITES.flatMap((site) =>
    Array.from({ length: passes.get(site) ?? 0 }, (_, i) => ({ site, nth: i + 1 })),
  );
  if (ONLY_SITES) return all.filter((p) => ONLY_SITES.has(p.site));
  if (FULL) return all;
  const random = seededRandom(SEED + (mode.name === '2w' ? 1 : 0));
  const sites = [...KILL_SITES].sort(() => random() - 0.5).slice(0, CI_SITES_PER_MODE);
  return sites.map((site) => ({ site, nth: 1 + Math.floor(random() * (passes.get(site) ?? 1)) }));
}

describe.skipIf(noDocker)('batch supervisor crash recovery', () => {
  beforeAll(async () => {
    for (const mode of MODES) {
      const fx = await fixture(`trace-${mode.name}`, fivePairs(), mode.capacity);
      const trace = join(fx.root, 'failpoints.trace');
      const run = await runCli(startArgs(fx), { env: { ROBOGUIDE_FAILPOINT_TRACE: trace } });
      await remember(fx);
      if (run.code !== 0) throw new Error(`traced run (${mode.name}) failed: ${run.stderr.slice(-1500)}`);
      counts.set(mode.name, await failpointCounts(trace));
    }
  }, 300_000);

  afterAll(async () => {
    for (const id of batches) await sweep({ 'roboguide.batch': id });
    console.log(
      `crash tests (${ONLY_SITES ? 'named sites' : FULL ? 'full' : 'CI subset'}, seed ${SEED}): ${tally.killPoints} systematic kill points fired, ${tally.notFired} not fired, ` +
        `${tally.randomKills} random SIGKILLs, ${tally.runs} CLI runs, ${tally.violations.length} violations, ${tally.ranButLost.length} ran-but-lost_worker notes`,
    );
    for (const v of tally.violations) console.log(`  VIOLATION ${v}`);
    for (const v of tally.ranButLost) console.log(`  NOTE driver ran, result lost_worker: ${v}`);
    if (process.env['KEEP_CRASH_DIRS'] !== '1')
      await Promise.all(roots.map((r) => rm(r, { recursive: true, force: true })));
  });

  it('the traced batch passes every kill site, and only those', () => {
    for (const mode of MODES)
      expect([...(counts.get(mode.name)?.keys() ?? [])].sort(), mode.name).toEqual(KILL_SITES);
  });

  it.each(MODES.filter((m) => PARTS.has(m.name)).map((m) => [m.name, m] as const))(
    'systematic SIGKILLs (%s): every invariant holds after resume',
    async (_name, mode) => {
      const points = pointsFor(mode);
      const found: string[] = [];
      let done = 0;
      await pool(points, CONCURRENCY, async ({ site, nth }) => {
        const v = await killPoint(mode, site, nth);
        found.push(...v);
        for (const line of v) console.log(`VIOLATION ${line}`);
        if (++done % 25 === 0)
          console.log(
            `systematic ${mode.name}: ${done}/${points.length} points, ${found.length} violations so far`,
          );
      });
      tally.violations.push(...found);
      console.log(`systematic ${mode.name}: ${points.length} points run`);
      expect(found).toEqual([]);
    },
    FULL ? 4 * 3600_000 : 600_000,
  );

  it.runIf(PARTS.has('random'))(
    'random SIGKILLs of two-worker batches (seeded), resumed until drained: every invariant holds',
    async () => {
      const random = seededRandom(SEED);
      const outcomes = ['completed', 'completed', 'infra'] as const;
      const jobs: CrashJob[] = Array.from({ length: 8 }, (_, i) => {
        const outcome = outcomes[i % outcomes.length] ?? 'completed';
        return {
          id: `r${i + 1}`,
          actions: ['numbered=2', ...(i === 0 ? ['usage=1000'] : []), `outcome=${outcome}`],
          expected: outcome === 'infra' ? 'infrastructure_failure' : 'completed',
        };
      });
      const found: string[] = [];
      const delays: number[] = [];
      let batchNo = 0;
      const worker = async (): Promise<void> => {
        while (tally.randomKills < RANDOM_KILLS) {
          const label = `random seed ${SEED} batch ${batchNo}`;
          const fx = await fixture(`random-${batchNo++}`, jobs, TWO_WORKERS);
          let args = startArgs(fx);
          for (let round = 0; round < 12 && tally.randomKills < RANDOM_KILLS; round++) {
            const delayMs = Math.floor(100 + random() * 2_400);
            const run = await runCli(args, { killAfterSupervisingMs: delayMs, output: fx.output });
            tally.runs++;
            await remember(fx);
            args = resumeArgs(fx);
            if (run.killedByTest && run.signal === 'SIGKILL') {
              if (++tally.randomKills % 10 === 0)
                console.log(`random: ${tally.randomKills} SIGKILLs, ${found.length} violations so far`);
              delays.push(delayMs);
            } else if (run.code !== 0) {
              found.push(`${label}: round ${round} exited ${String(run.code)}: ${run.stderr.slice(-800)}`);
              break;
            } else break; // finished before the kill: the batch is done (or paused: resumed below)
          }
          const drain = await resumeUntilDrained(fx, 12);
          tally.runs += drain.resumes;
          if (drain.lastState !== 'drained')
            found.push(`${label}: did not drain (${String(drain.lastState)})`);
          tally.ranButLost.push(...(await ranButLost(fx)).map((id) => `${label}: ${id}`));
          const broken = (await checkInvariants(fx)).map((s) => `${label}: ${s}`);
          for (const line of broken) console.log(`VIOLATION ${line}`);
          found.push(...broken);
          const id = await batchIdOf(fx);
          if (id) await sweep({ 'roboguide.batch': id });
        }
      };
      await Promise.all(Array.from({ length: CONCURRENCY }, worker));
      tally.violations.push(...found);
      console.log(
        `random: ${delays.length} SIGKILLs over ${batchNo} batches, delays ${Math.min(...delays)}–${Math.max(...delays)} ms after supervising`,
      );
      expect(tally.randomKills).toBeGreaterThanOrEqual(RANDOM_KILLS);
      expect(found).toEqual([]);
    },
    FULL ? 4 * 3600_000 : 600_000,
  );

  it.runIf(FULL && PARTS.size === 3)('the full run reached the reliability goal', () => {
    expect(tally.killPoints + tally.notFired).toBeGreaterThanOrEqual(FULL_MIN_POINTS);
    expect(tally.randomKills).toBeGreaterThanOrEqual(100);
  });
});
