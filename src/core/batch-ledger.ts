import { JournalFolder, type Counts, type JournalFold } from './batch-state.js';
import { knownEntry, type JournalEntry } from './journal-events.js';
import { CLASSIFICATIONS } from './result.js';
import { wallDeadlineFromClaim } from './wall-budget.js';
import {
  BASIS_SCHEMA,
  durationMs,
  FAILED_SHOWN,
  finishFactsOf,
  str,
  zeroFinished,
  type ApplyOutcome,
  type FailedPair,
  type FinishFacts,
  type LedgerBasis,
  type LedgerJob,
  type OpenClaim,
} from './ledger-facts.js';

/**
 * The batch's bookkeeping as status needs it, kept up to date one journal record at a time (SPEC §6.11). Pure.
 *
 * Status never needs every job: it needs how many are claimed and finished (per classification), the pairs
 * claimed without a result, the finished pairs' summed durations (for the ETA) and their largest GPU peak. The
 * ledger holds exactly that, updated by `apply(record)` in journal order; a job whose records do not tell it
 * everything (a record from an older writer, a harness fault, a receipt published just before a crash) is
 * set aside as `unsettled` until its files are read (`settle`). Its `basis()` is what status.json keeps so that
 * `e1-batch status` can apply only the records written after it.
 */

type Entry =
  | { readonly kind: 'open'; claim: OpenClaim }
  | { readonly kind: 'finished'; readonly facts: FinishFacts }
  | { readonly kind: 'unsettled' };

export function deadlineOf(claimedAt: string, timeoutSeconds: number): string {
  return new Date(wallDeadlineFromClaim(claimedAt, timeoutSeconds)).toISOString();
}

export class BatchLedger {
  #seq = 0;
  #bytes = 0;
  readonly #total: number;
  #claimed = 0;
  readonly #finished = zeroFinished();
  #durationMs = 0;
  #timed = 0;
  #peak: number | null = null;
  #peaks = 0;
  readonly #placed = new Map<string, string>();
  /** The most recent failed pairs, oldest first, at most FAILED_SHOWN. */
  #failed: FailedPair[] = [];
  /**
   * Full ledgers (the supervisor's, cold status) know every claimed job; a ledger restored from a basis (hot status)
   * knows only the open claims, and answers `unsure` to a record it cannot place.
   */
  readonly #full: boolean;
  readonly #entries = new Map<string, Entry>();
  /** The open entries again, so that status costs O(open claims), not O(jobs). */
  readonly #openClaims = new Map<string, { claim: OpenClaim }>();
  readonly #folder: JournalFolder;
  readonly #indexOf: (jobId: string) => number | undefined;
  readonly #timeoutOf: (jobId: string) => number | undefined;

  private constructor(
    total: number,
    full: boolean,
    folder: JournalFolder,
    indexOf: (jobId: string) => number | undefined,
    timeoutOf: (jobId: string) => number | undefined,
  ) {
    this.#total = total;
    this.#full = full;
    this.#folder = folder;
    this.#indexOf = indexOf;
    this.#timeoutOf = timeoutOf;
  }

  /** An empty ledger over the manifest's jobs (nothing claimed, nothing folded). */
  static forJobs(jobs: readonly LedgerJob[]): BatchLedger {
    const index = new Map(jobs.map((j, i) => [j.job_id, i]));
    const timeout = new Map(jobs.map((j) => [j.job_id, j.timeout_seconds]));
    return new BatchLedger(
      jobs.length,
      true,
      new JournalFolder(),
      (id) => index.get(id),
      (id) => timeout.get(id),
    );
  }

  /** The ledger a status.json was written from; `indexOf` places claims recorded after it. */
  static restore(basis: LedgerBasis, indexOf: (jobId: string) => number | undefined): BatchLedger {
    const known = new Map(basis.open.map((c) => [c.job_id, c.index]));
    const ledger = new BatchLedger(
      basis.total,
      false,
      new JournalFolder(basis.fold),
      (id) => known.get(id) ?? indexOf(id),
      () => undefined,
    );
    ledger.#seq = basis.journal_seq;
    ledger.#bytes = basis.journal_bytes;
    ledger.#claimed = basis.claimed;
    for (const c of CLASSIFICATIONS) ledger.#finished[c] = basis.finished[c];
    ledger.#durationMs = basis.duration_ms;
    ledger.#timed = basis.timed;
    ledger.#peak = basis.gpu_peak_mib;
    ledger.#peaks = basis.gpu_peaks;
    for (const claim of basis.open) ledger.#setOpen(claim);
    const failed: unknown = basis.failed_recent;
    ledger.#failed = Array.isArray(failed) ? (failed as FailedPair[]).slice(-FAILED_SHOWN) : [];
    return ledger;
  }

  get journalSeq(): number {
    return this.#seq;
  }

  get journalBytes(): number {
    return this.#bytes;
  }

  /**
   * Fold one journal record (in journal order; `endBytes`: the offset just past it). Job records that do not say
   * everything status needs make their job unsettled (full ledger) or are answered `unsure` (restored ledger).
   */
  apply(entry: JournalEntry, endBytes?: number): ApplyOutcome {
    this.#folder.apply(entry);
    this.#notePlacement(entry);
    if (typeof entry.seq === 'number') this.#seq = entry.seq;
    if (endBytes !== undefined) this.#bytes = endBytes;
    const record = knownEntry(entry);
    switch (record?.type) {
      case 'claimed':
        return this.#applyJob(record, (jobId, entry) => this.#applyClaimed(jobId, entry, record));
      case 'container_created':
        return this.#applyJob(record, (_jobId, entry) => {
          const containerId = str(record.container_id);
          if (entry?.kind === 'open' && containerId !== null)
            entry.claim = { ...entry.claim, container_id: containerId };
          return 'applied';
        });
      case 'pair_finished':
        return this.#applyJob(record, (jobId, entry) => this.#applyFinished(jobId, entry, record));
      case 'harness_fault':
        // A receipt or result write that failed: the file may or may not be there. Its files decide.
        if (str(record.job_id) !== null && !this.#full) return 'unsure';
        return this.#applyJob(record, (jobId) => this.#unsettle(jobId));
      default:
        return 'applied';
    }
  }

  /** A job record: applied by `apply` when its job is one of the manifest's (status never counts others). */
  #applyJob(
    record: { readonly type: string; readonly job_id?: unknown },
    apply: (jobId: string, entry: Entry | undefined) => ApplyOutcome,
  ): ApplyOutcome {
    const jobId = str(record.job_id);
    if (jobId === null || this.#indexOf(jobId) === undefined) {
      return record.type === 'claimed' || record.type === 'pair_finished'
        ? this.#full || jobId === null
          ? 'applied'
          : 'unsure'
        : 'applied';
    }
    return apply(jobId, this.#entries.get(jobId));
  }

  #applyClaimed(
    jobId: string,
    entry: Entry | undefined,
    r: Extract<JournalEntry, { type: 'claimed' }>,
  ): ApplyOutcome {
    const claimId = str(r.claim_id);
    const claimedAt = str(r.claimed_at);
    const deadline = str(r.deadline);
    if (entry !== undefined || claimId === null || claimedAt === null || deadline === null)
      return this.#unsettle(jobId);
    this.#open({
      job_id: jobId,
      index: this.#indexOf(jobId) ?? 0,
      claim_id: claimId,
      claimed_at: claimedAt,
      deadline,
      container_id: null,
    });
    return 'applied';
  }

  #applyFinished(
    jobId: string,
    entry: Entry | undefined,
    r: Extract<JournalEntry, { type: 'pair_finished' }>,
  ): ApplyOutcome {
    const facts = finishFactsOf(r);
    const claimId = str(r.claim_id);
    if (
      facts === null ||
      (entry !== undefined && (entry.kind !== 'open' || entry.claim.claim_id !== claimId))
    )
      return this.#unsettle(jobId);
    if (entry === undefined) {
      // A receipt published without its `claimed` record (a crash between the two), finished on resume.
      if (!this.#full) return 'unsure';
      this.#claimed++;
    }
    this.#finish(jobId, facts);
    return 'applied';
  }

  /** Fold a record into the batch facts (pauses, stops, exits) only: the jobs are settled from their files. */
  foldOnly(record: JournalEntry): void {
    this.#folder.apply(record);
    this.#notePlacement(record);
    if (typeof record.seq === 'number') this.#seq = record.seq;
  }

  /** Swarm: the node a pair was last placed on (its `pair_placed` records), or undefined. */
  placement(jobId: string): string | undefined {
    return this.#placed.get(jobId);
  }

  #notePlacement(journalEntry: JournalEntry): void {
    const record = knownEntry(journalEntry);
    if (record?.type !== 'pair_placed') return;
    const jobId = str(record.job_id);
    const node = str(record.node);
    if (jobId === null || node === null) return;
    this.#placed.set(jobId, node);
    const entry = this.#entries.get(jobId);
    if (entry?.kind === 'open') entry.claim = { ...entry.claim, node };
  }

  /** Jobs whose files must be read before status is exact (see `settle`). */
  unsettled(): string[] {
    return [...this.#entries].flatMap(([id, e]) => (e.kind === 'unsettled' ? [id] : []));
  }

  /** Jobs with a claim and no result, in manifest order. */
  open(): OpenClaim[] {
    return [...this.#openClaims.values()].map((e) => e.claim).sort((a, b) => a.index - b.index);
  }

  /** Jobs the ledger counts as finished. */
  finishedJobs(): string[] {
    return [...this.#entries].flatMap(([id, e]) => (e.kind === 'finished' ? [id] : []));
  }

  /** Whether the ledger has a record of this job (any state). */
  knows(jobId: string): boolean {
    return this.#entries.has(jobId);
  }

  /** Finished, as far as this ledger knows (a restored ledger knows only its open claims: null otherwise). */
  finishedKnown(jobId: string): boolean | null {
    const e = this.#entries.get(jobId);
    if (e?.kind === 'finished') return true;
    if (e?.kind === 'open') return false;
    return this.#full ? false : null;
  }

  /**
   * A job as its files show it: the receipt (the claim) and the result. Replaces whatever the ledger had for it;
   * the truth for claims and finishes is the files, the journal only says when to look.
   */
  settle(
    jobId: string,
    receipt: {
      readonly claim_id: string;
      readonly claimed_at: string;
      readonly container_id: string | null;
    } | null,
    result: FinishFacts | null,
  ): void {
    const index = this.#indexOf(jobId);
    if (index === undefined) return;
    this.#forget(jobId);
    if (receipt === null) return;
    if (result !== null) {
      this.#claimed++;
      this.#finish(jobId, result);
      return;
    }
    const timeout = this.#timeoutOf(jobId) ?? 0;
    this.#open({
      job_id: jobId,
      index,
      claim_id: receipt.claim_id,
      claimed_at: receipt.claimed_at,
      deadline: deadlineOf(receipt.claimed_at, timeout),
      container_id: receipt.container_id,
    });
  }

  /** Records the position in the journal without a record (the offset of an empty or just-read journal). */
  at(seq: number, bytes: number): void {
    this.#seq = seq;
    this.#bytes = bytes;
  }

  fold(): JournalFold {
    return this.#folder.fold();
  }

  /** Counts as status shows them; `running`: the pairs running now (the caller decides which). */
  counts(running: number): Counts {
    return {
      total: this.#total,
      pending: this.#total - this.#claimed,
      claimed: this.#openClaims.size,
      running,
      completed: this.#finished.completed,
      infrastructure_failure: this.#finished.infrastructure_failure,
      fatal: this.#finished.fatal,
      provider_stop: this.#finished.provider_stop,
      harness_failure: this.#finished.harness_failure,
    };
  }

  finishedCount(): number {
    return CLASSIFICATIONS.reduce((sum, c) => sum + this.#finished[c], 0);
  }

  /** The usable GPU peaks as the dispatch rule reads them: the largest, or none. */
  gpuPeaks(): number[] {
    return this.#peak === null ? [] : [this.#peak];
  }

  /** The most recent failed pairs, newest first (at most FAILED_SHOWN). */
  failedRecent(): FailedPair[] {
    return [...this.#failed].reverse();
  }

  /** Mean duration (seconds) of the finished pairs with a usable duration, and how many; null before the first. */
  meanDuration(): { readonly meanSec: number; readonly basisPairs: number } | null {
    return this.#timed === 0
      ? null
      : { meanSec: this.#durationMs / 1000 / this.#timed, basisPairs: this.#timed };
  }

  basis(): LedgerBasis {
    return {
      schema: BASIS_SCHEMA,
      journal_seq: this.#seq,
      journal_bytes: this.#bytes,
      total: this.#total,
      claimed: this.#claimed,
      finished: { ...this.#finished },
      duration_ms: this.#durationMs,
      timed: this.#timed,
      gpu_peak_mib: this.#peak,
      gpu_peaks: this.#peaks,
      open: this.open(),
      fold: this.#folder.state(),
      failed_recent: [...this.#failed],
    };
  }

  #open(claim: OpenClaim): void {
    this.#claimed++;
    this.#setOpen(claim);
  }

  #setOpen(claim: OpenClaim): void {
    const entry = { kind: 'open' as const, claim };
    this.#entries.set(claim.job_id, entry);
    this.#openClaims.set(claim.job_id, entry);
  }

  #finish(jobId: string, facts: FinishFacts): void {
    this.#openClaims.delete(jobId);
    this.#entries.set(jobId, { kind: 'finished', facts });
    this.#finished[facts.classification]++;
    if (facts.classification !== 'completed') {
      this.#failed = this.#failed.filter((f) => f.job_id !== jobId);
      this.#failed.push({
        job_id: jobId,
        classification: facts.classification,
        reason: facts.first_reason ?? null,
        problem: facts.first_problem ?? null,
        finished_at: facts.finished_at,
      });
      // Newest last by finish time (journal order is finish order in a live batch; a cold read settles in any order).
      this.#failed.sort(
        (a, b) => a.finished_at.localeCompare(b.finished_at) || a.job_id.localeCompare(b.job_id),
      );
      if (this.#failed.length > FAILED_SHOWN) this.#failed.shift();
    }
    const ms = durationMs(facts);
    if (ms !== null) {
      this.#durationMs += ms;
      this.#timed++;
    }
    if (facts.gpu_peak_mib !== null) {
      this.#peaks++;
      this.#peak = this.#peak === null ? facts.gpu_peak_mib : Math.max(this.#peak, facts.gpu_peak_mib);
    }
  }

  #unsettle(jobId: string): ApplyOutcome {
    if (!this.#full) return 'unsure';
    this.#forget(jobId);
    this.#entries.set(jobId, { kind: 'unsettled' });
    return 'applied';
  }

  /** Takes a job's contribution out of the counts (a restored ledger never gets here for a finished job). */
  #forget(jobId: string): void {
    const entry = this.#entries.get(jobId);
    this.#entries.delete(jobId);
    this.#openClaims.delete(jobId);
    if (entry === undefined || entry.kind === 'unsettled') return;
    this.#claimed--;
    if (entry.kind === 'open') return;
    const { facts } = entry;
    this.#finished[facts.classification]--;
    this.#failed = this.#failed.filter((f) => f.job_id !== jobId);
    const ms = durationMs(facts);
    if (ms !== null) {
      this.#durationMs -= ms;
      this.#timed--;
    }
    if (facts.gpu_peak_mib !== null) {
      this.#peaks--;
      let peak: number | null = null;
      for (const e of this.#entries.values()) {
        if (e.kind === 'finished' && e.facts.gpu_peak_mib !== null)
          peak = peak === null ? e.facts.gpu_peak_mib : Math.max(peak, e.facts.gpu_peak_mib);
      }
      this.#peak = peak;
    }
  }
}
