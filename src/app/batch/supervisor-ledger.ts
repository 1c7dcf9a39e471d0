import type { BatchLedger } from '../../core/batch-ledger.js';
import { jobImage } from '../../core/manifest/parse.js';
import type { Manifest } from '../../core/manifest/schema.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import type { JournalEvent } from '../../core/journal-events.js';
import { readJobFiles, type JobFiles } from './batch-context.js';
import { gpuPeaksOf, ledgerFromFiles } from './status.js';

/**
 * Admission reserves a GPU pair's measured peak for its image (SPEC §7): the results read at start, then each
 * `pair_finished` record's peak as it is appended (never a rescan of the job folders).
 */
export class PeakBook {
  readonly #manifest: Manifest;
  readonly #jobs: ReadonlyMap<string, Manifest['jobs'][number]>;
  readonly #byImage = new Map<string, number[]>();

  constructor(manifest: Manifest) {
    this.#manifest = manifest;
    this.#jobs = new Map(manifest.jobs.map((j) => [j.job_id, j]));
  }

  note(jobId: string, peak: number): void {
    const job = this.#jobs.get(jobId);
    if (job === undefined) return;
    const image = jobImage(this.#manifest, job);
    this.#byImage.set(image, [...(this.#byImage.get(image) ?? []), peak]);
  }

  byImage(): ReadonlyMap<string, readonly number[]> {
    return this.#byImage;
  }
}

export interface SeededLedger {
  readonly book: BatchLedger;
  readonly peaks: PeakBook;
  readonly files: JobFiles[];
  /** Stop folding appended records into the ledger. */
  readonly stopFolding: () => void;
}

/**
 * The ledger status is written from: every record this store appends from here on is folded in as it becomes
 * durable; the records before, and the jobs, come from the journal and the files read once here.
 */
export async function seedLedger(store: EvidenceStore, manifest: Manifest): Promise<SeededLedger> {
  const peaks = new PeakBook(manifest);
  let ledger: BatchLedger | undefined;
  const early: { record: JournalEvent & { readonly seq: number }; endBytes: number }[] = [];
  const stopFolding = store.onJournalAppend((record, endBytes) => {
    if (record.type === 'pair_finished' && typeof record.gpu_peak_mib === 'number')
      peaks.note(record.job_id, record.gpu_peak_mib);
    if (ledger === undefined) early.push({ record, endBytes });
    else if (record.seq > ledger.journalSeq) ledger.apply(record, endBytes);
  });
  try {
    const files = await readJobFiles(store, manifest);
    for (const f of files) for (const peak of gpuPeaksOf([f])) peaks.note(f.job.job_id, peak);
    const slice = await store.readJournalSlice();
    const seeded = await ledgerFromFiles(store, manifest, files, slice.records);
    seeded.at(slice.records.at(-1)?.seq ?? 0, slice.endBytes);
    for (const { record, endBytes } of early)
      if (record.seq > seeded.journalSeq) seeded.apply(record, endBytes);
    ledger = seeded;
    return { book: seeded, peaks, files, stopFolding };
  } catch (err) {
    stopFolding();
    throw err;
  }
}
