import { REPORT_FILE } from '../../core/evidence-names.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import { errorDetail } from '../../core/errors.js';
import { buildReportModel } from '../../core/report/model.js';
import type { ReportModel } from '../../core/report/types.js';
import { renderReportHtml } from '../../core/report/html.js';
import type { Clock, TimerHandle } from '../ports/clock.js';
import type { HostIdentity } from '../ports/host-identity.js';
import type { Logger } from '../ports/logger.js';
import { loadBatch, readJobFiles } from './batch-context.js';
import { gpuHostUnobservable, jobRel } from './layout.js';
import { capacityConfigOf } from './capacity-config.js';
import { runningSupervisor } from './supervisor-liveness.js';

/** The report's data, fresh from the evidence (journal, receipts, results, the file names in each job folder). */
export async function readReportModel(
  store: EvidenceStore,
  now: Date,
  host: Pick<HostIdentity, 'isAlive'>,
  imagesMoved?: (output: string) => Promise<readonly string[]>,
): Promise<ReportModel> {
  const { batch, manifest } = await loadBatch(store);
  const files = await readJobFiles(store, manifest);
  const journal = await store.readJournal();
  const alive = (await runningSupervisor(store, host)) !== null;
  const jobs = await Promise.all(
    files.map(async (f) => ({
      job_id: f.job.job_id,
      timeout_seconds: f.job.timeout_seconds,
      receipt: f.receipt,
      result: f.result,
      files: f.receipt === null ? [] : await store.list(jobRel(f.job.job_id)),
    })),
  );
  return buildReportModel({
    batchId: batch.batch_id,
    createdAt: batch.created_at,
    capacity: capacityConfigOf(manifest, batch),
    gpuUnobservable: gpuHostUnobservable(batch),
    journal,
    jobs,
    supervisorAlive: alive,
    now: now.toISOString(),
    ...(batch.image_plan !== undefined ? { imagePlan: batch.image_plan } : {}),
    ...(imagesMoved !== undefined ? { imagesMoved: await imagesMoved(store.root) } : {}),
  });
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
  const html = renderReportHtml(model, { linkBase: target?.linkBase ?? '' });
  await (target?.store ?? store).writeBytesAtomic(target?.rel ?? REPORT_FILE, new TextEncoder().encode(html));
  return model;
}

export interface ReportRefresher {
  /** The batch moved: refresh soon, at most once per interval. Never throws. */
  poke(): void;
  /** Refresh now (after the last journal record) and stop the timer. Never throws. */
  flush(): Promise<void>;
}

/** Keeps D/report.html current while a supervisor runs (see boundedRefresher); a failed write is logged and skipped. */
export function reportRefresher(
  store: EvidenceStore,
  clock: Clock,
  logger: Logger,
  host: Pick<HostIdentity, 'isAlive'>,
  minIntervalMs = 2_000,
): ReportRefresher {
  return boundedRefresher(
    async () => {
      try {
        await writeReport(store, clock.now(), host);
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
  write: () => Promise<void>,
  clock: Clock,
  minIntervalMs: number,
): ReportRefresher {
  let nextMs = -Infinity;
  let writing = false;
  let pokedWhileWriting = false;
  let timer: TimerHandle | undefined;
  let chain: Promise<void> = Promise.resolve();
  let closed = false;
  const run = (): Promise<void> => {
    timer = undefined;
    writing = true; // claimed synchronously: a poke right after this one waits
    chain = chain.then(async () => {
      const startMs = clock.now().getTime();
      await write().catch(() => undefined);
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
      await run();
    },
  };
}
