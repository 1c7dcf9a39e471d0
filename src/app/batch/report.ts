import { BATCH_FILE, REPORT_FILE } from '../../core/evidence-names.js';
import type { JournalRecord } from '../../core/journal-events.js';
import type { Job, Manifest } from '../../core/manifest/schema.js';
import { isReceipt } from '../../core/receipt.js';
import { isResultRecord } from '../../core/result.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import { errorDetail } from '../../core/errors.js';
import { buildReportModel } from '../../core/report/model.js';
import type { ReportJob, ReportModel } from '../../core/report/types.js';
import { renderReportHtml } from '../../core/report/html.js';
import type { Clock, TimerHandle } from '../ports/clock.js';
import type { HostIdentity } from '../ports/host-identity.js';
import type { Logger } from '../ports/logger.js';
import { loadBatch } from './batch-context.js';
import {
  gpuHostUnobservable,
  isBatchRecord,
  jobRel,
  receiptRel,
  resultRel,
  type BatchRecord,
} from './layout.js';
import { capacityConfigOf } from './capacity-config.js';
import { runningSupervisor } from './supervisor-liveness.js';

/** The report's data, fresh from the evidence (journal, receipts, results, the file names in each job folder). */
export async function readReportModel(
  store: EvidenceStore,
  now: Date,
  host: Pick<HostIdentity, 'isAlive'>,
  imagesMoved?: (output: string) => Promise<readonly string[]>,
): Promise<ReportModel> {
  const known = await readAll(store);
  return modelOf(store, known, now, host, imagesMoved);
}

/** What a report is built from, as read: the frozen batch, the journal up to `journalEnd`, each job's files. */
interface ReportEvidence {
  readonly batch: BatchRecord;
  readonly manifest: Manifest;
  readonly journal: JournalRecord[];
  journalEnd: number;
  readonly jobs: Map<string, ReportJob>;
}

/**
 * Everything, the journal first: the job files read after it are at least as new as it, so a change to a job made
 * after the journal was read comes with a record a later read of the journal's tail will find (ReportReader).
 */
async function readAll(store: EvidenceStore): Promise<ReportEvidence> {
  const { batch, manifest } = await loadBatch(store);
  const slice = await store.readJournalSlice();
  const jobs = await Promise.all(manifest.jobs.map((job) => reportJob(store, job)));
  return {
    batch,
    manifest,
    journal: slice.records,
    journalEnd: slice.endBytes,
    jobs: new Map(jobs.map((j) => [j.job_id, j])),
  };
}

/** One job's part of the report: its receipt and result, and once claimed the names in its folder. */
async function reportJob(store: EvidenceStore, job: Job): Promise<ReportJob> {
  const receipt = await store.readJson(receiptRel(job.job_id), isReceipt);
  const result = await store.readJson(resultRel(job.job_id), isResultRecord);
  return {
    job_id: job.job_id,
    timeout_seconds: job.timeout_seconds,
    receipt,
    result,
    files: receipt === null ? [] : await store.list(jobRel(job.job_id)),
  };
}

async function modelOf(
  store: EvidenceStore,
  known: ReportEvidence,
  now: Date,
  host: Pick<HostIdentity, 'isAlive'>,
  imagesMoved?: (output: string) => Promise<readonly string[]>,
): Promise<ReportModel> {
  const { batch, manifest } = known;
  // The journal just read: a whole read of it per refresh is what the reader saves.
  const alive = (await runningSupervisor(store, host, known.journal)) !== null;
  return buildReportModel({
    batchId: batch.batch_id,
    createdAt: batch.created_at,
    capacity: capacityConfigOf(manifest, batch),
    gpuUnobservable: gpuHostUnobservable(batch),
    journal: known.journal,
    jobs: manifest.jobs.map((job) => known.jobs.get(job.job_id)!),
    supervisorAlive: alive,
    now: now.toISOString(),
    ...(batch.image_plan !== undefined ? { imagePlan: batch.image_plan } : {}),
    ...(imagesMoved !== undefined ? { imagesMoved: await imagesMoved(store.root) } : {}),
  });
}

/** A whole read at least this often, whatever the journal says (a change made by another hand shows by then). */
export const REPORT_FULL_READ_MS = 30_000;

/**
 * The report's data kept between the refreshes of one supervisor (issue 39). A whole read costs every job's files
 * (receipt, result, folder listing), the manifest's parse and the whole journal: at 1,000 pairs about 340 ms of CPU
 * per refresh, a fifth of a core under the refresh's duty limit, taken from the pairs. A refresh now reads the
 * journal's new records and batch.json, and again only the jobs those records name and the claimed ones without a
 * result (their folders fill while they run). Every write to a job's folder is followed by a record naming the
 * job (receipt, claimed; result, pair_finished; the reconciliation, reconciled; an unwritten result,
 * harness_fault), so while the journal's appends succeed what a refresh keeps is at most one record behind the files
 * (a claimed job without a result is read every time anyway). A whole read comes first, then every
 * REPORT_FULL_READ_MS (what a failed append or another hand left out shows by then), and when asked (the
 * supervisor's last page: exactly `e1-batch report`'s).
 */
export class ReportReader {
  readonly #store: EvidenceStore;
  readonly #host: Pick<HostIdentity, 'isAlive'>;
  readonly #monotonicMs: () => number;
  readonly #fullEveryMs: number;
  #known: ReportEvidence | null = null;
  #fullAtMs = -Infinity;

  /** `monotonicMs` times the whole reads (a step of the wall clock does not put them off). */
  constructor(
    store: EvidenceStore,
    host: Pick<HostIdentity, 'isAlive'>,
    monotonicMs: () => number,
    fullEveryMs = REPORT_FULL_READ_MS,
  ) {
    this.#store = store;
    this.#host = host;
    this.#monotonicMs = monotonicMs;
    this.#fullEveryMs = fullEveryMs;
  }

  async read(now: Date, whole = false): Promise<ReportModel> {
    const due = this.#monotonicMs() - this.#fullAtMs >= this.#fullEveryMs;
    const known = whole || due ? null : await this.#tail();
    return modelOf(this.#store, known ?? (await this.#readAll()), now, this.#host);
  }

  async #readAll(): Promise<ReportEvidence> {
    this.#known = null; // a failed read leaves nothing half-updated to build on
    const startedMs = this.#monotonicMs();
    const known = await readAll(this.#store);
    this.#known = known;
    this.#fullAtMs = startedMs;
    return known;
  }

  /** The evidence kept, brought up to the journal's end; null: read it all instead. */
  async #tail(): Promise<ReportEvidence | null> {
    const known = this.#known;
    if (known === null) return null;
    const batch = await this.#store.readJson(BATCH_FILE, isBatchRecord);
    const slice = batch === null ? null : await this.#store.readJournalFrom(known.journalEnd);
    if (batch === null || slice === null) return null;
    const named = new Set<string>();
    for (const record of slice.records) {
      if ('job_id' in record && typeof record.job_id === 'string') named.add(record.job_id);
    }
    const stale = known.manifest.jobs.filter((job) => {
      const kept = known.jobs.get(job.job_id);
      return kept === undefined || named.has(job.job_id) || (kept.receipt !== null && kept.result === null);
    });
    this.#known = null;
    const fresh = await Promise.all(stale.map((job) => reportJob(this.#store, job)));
    for (const job of fresh) known.jobs.set(job.job_id, job);
    for (const record of slice.records) known.journal.push(record);
    known.journalEnd = slice.endBytes;
    const updated = { ...known, batch };
    this.#known = updated;
    return updated;
  }
}

export interface ReportTarget {
  /** Where the page goes: a store rooted at its folder, and its name there. */
  readonly store: EvidenceStore;
  readonly rel: string;
  /** Prefix that makes the batch-relative evidence links work from the page's folder. */
  readonly linkBase: string;
}

/** Build the model, render it, and replace the page atomically (temp file, fsync, rename). */
export async function writeReport(
  store: EvidenceStore,
  now: Date,
  host: Pick<HostIdentity, 'isAlive'>,
  target?: ReportTarget,
  imagesMoved?: (output: string) => Promise<readonly string[]>,
): Promise<ReportModel> {
  const model = await readReportModel(store, now, host, imagesMoved);
  await writeRendered(store, model, target);
  return model;
}

async function writeRendered(store: EvidenceStore, model: ReportModel, target?: ReportTarget): Promise<void> {
  const html = renderReportHtml(model, { linkBase: target?.linkBase ?? '' });
  await (target?.store ?? store).writeBytesAtomic(target?.rel ?? REPORT_FILE, new TextEncoder().encode(html));
}

export interface ReportRefresher {
  /** The batch moved: refresh soon, at most once per interval. Never throws. */
  poke(): void;
  /** Refresh now (after the last journal record) and stop the timer. Never throws. */
  flush(): Promise<void>;
}

/**
 * Keeps D/report.html current while a supervisor runs (see boundedRefresher; each page from a ReportReader, the last
 * from a whole read); a failed write is logged and skipped.
 */
export function reportRefresher(
  store: EvidenceStore,
  clock: Clock,
  logger: Logger,
  host: Pick<HostIdentity, 'isAlive'>,
  minIntervalMs = 2_000,
): ReportRefresher {
  const reader = new ReportReader(store, host, clock.monotonicMs);
  return boundedRefresher(
    async (last) => {
      try {
        await writeRendered(store, await reader.read(clock.now(), last));
      } catch (err) {
        // The page is derived: the evidence is already durable, and a full disk must not stop the batch.
        logger.warn({ err: errorDetail(err) }, 'report.html not refreshed');
      }
    },
    clock,
    minIntervalMs,
  );
}

/** After a write, wait at least this many times its own duration: refreshing costs at most ~20% of a core. */
const REFRESH_DUTY_FACTOR = 4;

/**
 * A refresh at a bounded rate: a poke writes at once when allowed, otherwise one write is scheduled for when it
 * is; pokes in between coalesce. The next write is allowed `minIntervalMs` after the last one started, and not
 * before REFRESH_DUTY_FACTOR times its duration after it ended (a 10,000-pair batch takes seconds to render from
 * disk on a busy machine). Writes never overlap; the timer never keeps the process alive; flush writes once more
 * and stops.
 */
export function boundedRefresher(
  write: (last: boolean) => Promise<void>,
  clock: Clock,
  minIntervalMs: number,
): ReportRefresher {
  let nextMs = -Infinity;
  let writing = false;
  let pokedWhileWriting = false;
  let timer: TimerHandle | undefined;
  let chain: Promise<void> = Promise.resolve();
  let closed = false;
  const run = (last = false): Promise<void> => {
    timer = undefined;
    writing = true; // claimed synchronously: a poke right after this one waits
    chain = chain.then(async () => {
      const startMs = clock.now().getTime();
      await write(last).catch(() => undefined);
      const endMs = clock.now().getTime();
      nextMs = Math.max(startMs + minIntervalMs, endMs + REFRESH_DUTY_FACTOR * (endMs - startMs));
      writing = false;
      if (pokedWhileWriting) {
        pokedWhileWriting = false;
        poke();
      }
    });
    return chain;
  };
  const poke = (): void => {
    if (closed || timer !== undefined) return;
    if (writing) {
      pokedWhileWriting = true;
      return;
    }
    const wait = nextMs - clock.now().getTime();
    if (wait <= 0) {
      void run();
      return;
    }
    timer = clock.setTimer(wait, () => void run(), { unref: true });
  };
  return {
    poke,
    async flush(): Promise<void> {
      closed = true;
      timer?.cancel();
      await run(true);
    },
  };
}
