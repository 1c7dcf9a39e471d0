/**
 * Crash-test harness for the batch supervisor: a batch of synthetic-driver pairs, the CLI run as a child
 * process (`--foreground`, so the child IS the supervisor), and the post-drain invariants (SPEC §4–§5).
 */
import { spawn } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { containersLabelled, DRIVER_IMAGE } from './docker.js';

export interface CrashJob {
  readonly id: string;
  /** Driver actions after `count` (which proves how many times the driver ran). */
  readonly actions: readonly string[];
  /** Classification the outcome action leads to when the pair is not lost. */
  readonly expected: 'completed' | 'infrastructure_failure';
}

export interface CrashFixture {
  readonly root: string;
  readonly manifest: string;
  readonly output: string;
  readonly registry: string;
  readonly counter: string;
  readonly jobs: readonly CrashJob[];
}

export interface CliRun {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stderr: string;
  /** True when this harness sent the SIGKILL (random kills), false for a failpoint's own SIGKILL. */
  readonly killedByTest: boolean;
}

/** The CLI under test; `ROBOGUIDE_CRASH_BIN` points a long full run at a frozen copy of the build. */
const BIN = resolve(process.env['ROBOGUIDE_CRASH_BIN'] ?? 'bin/run.js');

/** Two workers: the first completed pair reports a GPU peak that lets the dispatch policy run two at once. */
export const TWO_WORKERS = {
  max_workers: 2,
  gpu_total_mib: 81559,
  gpu_baseline_mib: 1200,
  gpu_fraction: 0.9,
} as const;

export async function writeCrashFixture(
  root: string,
  jobs: readonly CrashJob[],
  capacity: object = { max_workers: 1 },
): Promise<CrashFixture> {
  const work = join(root, 'work');
  await mkdir(join(work, 'out'), { recursive: true });
  const manifest = {
    schema: 'roboguide.e1.batch/v0.1',
    image: DRIVER_IMAGE,
    jobs: jobs.map((j) => ({
      job_id: j.id,
      argv: ['/opt/driver/run', 'count', ...j.actions],
      cwd: work,
      outcome_path: join(work, 'out', `${j.id}.json`),
      environment: {},
      timeout_seconds: 60,
    })),
    source_sha256: {},
    capacity,
    stop_budget_seconds: 5,
  };
  const path = join(root, 'manifest.json');
  await writeFile(path, JSON.stringify(manifest, null, 2));
  return {
    root,
    manifest: path,
    output: join(root, 'D'),
    registry: join(root, 'registry.db'),
    counter: join(work, 'driver-runs.log'),
    jobs,
  };
}

export function startArgs(fx: CrashFixture): string[] {
  return [
    'e1-batch',
    'start',
    '--manifest',
    fx.manifest,
    '--output',
    fx.output,
    '--registry',
    fx.registry,
    '--foreground',
  ];
}

export function resumeArgs(fx: CrashFixture): string[] {
  return ['e1-batch', 'resume', '--output', fx.output, '--foreground'];
}

export interface RunOptions {
  readonly env?: Readonly<Record<string, string>>;
  /** SIGKILL the child this long after it recorded itself as the batch's supervisor (supervisor.json). */
  readonly killAfterSupervisingMs?: number;
  readonly output?: string;
}

/** Runs `node bin/run.js …` (the Node running the tests); resolves when the child is gone. */
export function runCli(args: readonly string[], opts: RunOptions = {}): Promise<CliRun> {
  const env: Record<string, string | undefined> = { ...process.env, ...opts.env };
  if (opts.env?.['ROBOGUIDE_FAILPOINT'] === undefined) delete env['ROBOGUIDE_FAILPOINT'];
  if (opts.env?.['ROBOGUIDE_FAILPOINT_TRACE'] === undefined) delete env['ROBOGUIDE_FAILPOINT_TRACE'];
  const child = spawn(process.execPath, ['--disable-warning=ExperimentalWarning', BIN, ...args], {
    env,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  let killedByTest = false;
  let gone = false;
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  if (opts.killAfterSupervisingMs !== undefined && opts.output !== undefined) {
    const delayMs = opts.killAfterSupervisingMs;
    const supervisorFile = join(opts.output, 'supervisor.json');
    const poll = async (): Promise<void> => {
      while (!gone) {
        const pid = await readJsonOrNull<{ pid: number }>(supervisorFile).then(
          (r) => r?.pid,
          () => undefined,
        );
        if (pid === child.pid) break;
        await sleepMs(10);
      }
      await sleepMs(delayMs);
      if (!gone) killedByTest = child.kill('SIGKILL');
    };
    void poll();
  }
  return new Promise((resolvePromise, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => {
      gone = true;
      resolvePromise({ code, signal, stderr, killedByTest });
    });
  });
}

export interface DrainReport {
  readonly resumes: number;
  readonly lastState: string | null;
}

/** Resumes (no failpoint, no kill) until a supervisor exits normally with every job finished. */
export async function resumeUntilDrained(fx: CrashFixture, maxResumes: number): Promise<DrainReport> {
  for (let n = 1; n <= maxResumes; n++) {
    const run = await runCli(resumeArgs(fx));
    if (run.code !== 0)
      throw new Error(
        `resume #${n} failed (code ${String(run.code)}, signal ${String(run.signal)}): ${run.stderr.slice(-2000)}`,
      );
    const summary = await readJsonOrNull<{ state: string }>(join(fx.output, 'SUMMARY.json'));
    if (summary?.state === 'drained') return { resumes: n, lastState: summary.state };
  }
  const summary = await readJsonOrNull<{ state: string }>(join(fx.output, 'SUMMARY.json'));
  return { resumes: maxResumes, lastState: summary?.state ?? null };
}

export async function batchIdOf(fx: CrashFixture): Promise<string | null> {
  const batch = await readJsonOrNull<{ batch_id: string }>(join(fx.output, 'batch.json'));
  return batch?.batch_id ?? null;
}

interface ReceiptView {
  readonly claim_id: string;
  readonly reservation_id: string;
}
interface ResultView {
  readonly claim_id: string;
  readonly classification: string;
  readonly reasons: readonly string[];
  readonly cleanup: { readonly verified_absent: boolean };
}
interface ReservationRow {
  readonly id: string;
  readonly job_id: string;
  readonly claim_id: string;
  readonly state: string;
  readonly released_at: string | null;
}
interface SummaryView {
  readonly state: string;
  readonly counts: Readonly<Record<string, number>>;
}

/** Every invariant the crash tests demand of a drained batch; returns the violations (empty: all hold). */
export async function checkInvariants(fx: CrashFixture): Promise<string[]> {
  const v: string[] = [];
  const batchId = await batchIdOf(fx);
  if (batchId === null) return ['batch.json missing or unreadable'];
  const runs = await driverRuns(fx.counter);
  const results = new Map<string, ResultView>();
  const receipts = new Map<string, ReceiptView>();
  for (const job of fx.jobs) {
    const ran = runs.get(job.id) ?? 0;
    const receipt = await readJsonStrict<ReceiptView>(
      join(fx.output, 'jobs', job.id, 'receipt.json'),
      v,
      job.id,
    );
    const result = await readJsonStrict<ResultView>(
      join(fx.output, 'jobs', job.id, 'result.json'),
      v,
      job.id,
    );
    if (receipt) receipts.set(job.id, receipt);
    if (result) results.set(job.id, result);
    if (ran > 1) v.push(`${job.id}: driver ran ${ran} times (claimed pair launched again)`);
    if (!receipt || !result) continue;
    if (result.claim_id !== receipt.claim_id)
      v.push(`${job.id}: result claim ${result.claim_id} != receipt claim ${receipt.claim_id}`);
    const lost = result.reasons.includes('lost_worker');
    if (ran === 0 && !(result.classification === 'harness_failure' && lost)) {
      v.push(
        `${job.id}: driver never ran but classified ${result.classification} [${result.reasons.join(',')}]`,
      );
    }
    // A driver that ran and a pair recorded lost_worker is allowed by SPEC §5 (container removed before
    // result.json was written, then SIGKILL): reported as a note by the caller, not as a violation.
    if (ran === 1 && !lost && result.classification !== job.expected) {
      v.push(`${job.id}: classified ${result.classification}, outcome says ${job.expected}`);
    }
    if (ran === 1 && !lost) v.push(...(await logViolations(fx, job)));
  }
  const left = await containersLabelled({ 'roboguide.batch': batchId });
  if (left.length > 0) v.push(`${left.length} labelled container(s) left: ${left.join(',')}`);
  v.push(...registryViolations(fx.registry, batchId, results, receipts));
  v.push(...(await summaryViolations(fx, results)));
  return v;
}

/** The driver's numbered stdout lines, each exactly once and in order: nothing lost, nothing duplicated on reattach. */
async function logViolations(fx: CrashFixture, job: CrashJob): Promise<string[]> {
  const numbered = job.actions.find((a) => a.startsWith('numbered='));
  if (numbered === undefined) return [];
  const n = Number(numbered.slice('numbered='.length));
  const expected = Array.from({ length: n }, (_, i) => `${`line ${i + 1}`.padEnd(63)}\n`).join('');
  const text = await readFile(join(fx.output, 'jobs', job.id, 'stdout.log'), 'utf8').catch(() => null);
  if (text === null) return [`${job.id}: stdout.log missing`];
  return text === expected
    ? []
    : [
        `${job.id}: stdout.log has ${text.length} bytes, expected the ${n} numbered lines (${expected.length} bytes)`,
      ];
}

function registryViolations(
  path: string,
  batchId: string,
  results: ReadonlyMap<string, ResultView>,
  receipts: ReadonlyMap<string, ReceiptView>,
): string[] {
  const v: string[] = [];
  const db = new DatabaseSync(path, { readOnly: true });
  try {
    // node:sqlite types a row as Record<string, SQLOutputValue>; these columns are a ReservationRow's.
    const rows = db
      .prepare('SELECT id, job_id, claim_id, state, released_at FROM reservations WHERE batch_id = ?')
      .all(batchId) as unknown as ReservationRow[];
    const byId = new Map(rows.map((r) => [r.id, r]));
    for (const r of rows) {
      if ((r.state === 'released') !== (r.released_at !== null))
        v.push(`reservation ${r.id}: state ${r.state} with released_at ${String(r.released_at)}`);
      if (r.state !== 'held') continue;
      const result = results.get(r.job_id);
      const receipt = receipts.get(r.job_id);
      if (result?.cleanup.verified_absent === true)
        v.push(`reservation ${r.id} (${r.job_id}) still held though the container is verified absent`);
      else if (receipt?.claim_id !== r.claim_id)
        v.push(`reservation ${r.id} (${r.job_id}) held without a matching claim`);
    }
    for (const [jobId, receipt] of receipts) {
      if (!byId.has(receipt.reservation_id))
        v.push(`${jobId}: receipt names reservation ${receipt.reservation_id}, absent from the registry`);
    }
  } finally {
    db.close();
  }
  return v;
}

async function summaryViolations(
  fx: CrashFixture,
  results: ReadonlyMap<string, ResultView>,
): Promise<string[]> {
  const summary = await readJsonOrNull<SummaryView>(join(fx.output, 'SUMMARY.json')).catch(() => null);
  if (summary === null) return ['SUMMARY.json missing or unparseable'];
  const v: string[] = [];
  const c = summary.counts;
  const total = fx.jobs.length;
  const classes = ['completed', 'infrastructure_failure', 'fatal', 'provider_stop', 'harness_failure'];
  const finished = classes.reduce((sum, k) => sum + (c[k] ?? 0), 0);
  if (summary.state !== 'drained') v.push(`SUMMARY state ${summary.state}, expected drained`);
  if (c['total'] !== total) v.push(`SUMMARY total ${String(c['total'])} != ${total} jobs`);
  if (finished + (c['pending'] ?? 0) + (c['claimed'] ?? 0) !== total)
    v.push(`SUMMARY counts do not add up to ${total}: ${JSON.stringify(c)}`);
  for (const k of classes) {
    const actual = [...results.values()].filter((r) => r.classification === k).length;
    if ((c[k] ?? 0) !== actual) v.push(`SUMMARY ${k}=${String(c[k])} but ${actual} result(s) say so`);
  }
  return v;
}

/** Pairs whose driver ran but whose result says lost_worker (outcome kept, classification harness_failure). */
export async function ranButLost(fx: CrashFixture): Promise<string[]> {
  const runs = await driverRuns(fx.counter);
  const lost: string[] = [];
  for (const job of fx.jobs) {
    const result = await readJsonOrNull<ResultView>(join(fx.output, 'jobs', job.id, 'result.json'));
    if ((runs.get(job.id) ?? 0) === 1 && result?.reasons.includes('lost_worker') === true) lost.push(job.id);
  }
  return lost;
}

/** job id -> number of driver runs, from the counter file the `count` action appends to. */
export async function driverRuns(counter: string): Promise<Map<string, number>> {
  const text = await readFile(counter, 'utf8').catch(() => '');
  const runs = new Map<string, number>();
  for (const line of text.split('\n')) {
    const jobId = line.split(' ')[0];
    if (jobId) runs.set(jobId, (runs.get(jobId) ?? 0) + 1);
  }
  return runs;
}

async function readJsonStrict<T>(path: string, violations: string[], jobId: string): Promise<T | null> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch {
    violations.push(`${jobId}: ${path.split('/').pop() ?? path} missing`);
    return null;
  }
  try {
    return JSON.parse(text) as T;
  } catch {
    violations.push(`${jobId}: ${path.split('/').pop() ?? path} torn (${text.length} bytes do not parse)`);
    return null;
  }
}

async function readJsonOrNull<T>(path: string): Promise<T | null> {
  try {
    return JSON.parse(await readFile(path, 'utf8')) as T;
  } catch {
    return null;
  }
}

function sleepMs(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Kill point name -> how many times one run passed it, from a `ROBOGUIDE_FAILPOINT_TRACE` file. */
export async function failpointCounts(trace: string): Promise<Map<string, number>> {
  const text = await readFile(trace, 'utf8');
  const counts = new Map<string, number>();
  for (const name of text.split('\n')) if (name) counts.set(name, (counts.get(name) ?? 0) + 1);
  return counts;
}

export { seededRandom } from './seeded-random.js';
