import type { EgressStatus } from './egress/egress-tally.js';
import { JournalFolder, type Counts, type JournalFold } from './batch-state.js';
import { knownEntry, type JournalEntry } from './journal-events.js';
import { FinishedTally } from './finished-tally.js';
import { wallDeadlineFromClaim } from './wall-budget.js';
import {
  BASIS_SCHEMA,
  finishFactsOf,
  str,
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
  /** The finished pairs' sums (per classification, durations, GPU peak, recent failures). */
  #tally = new FinishedTally();
  readonly #placed = new Map<string, string>();
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
    ledger.#tally = FinishedTally.restore(basis);
    for (const claim of basis.open) ledger.#setOpen(claim);
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
      completed: this.#tally.count('completed'),
      infrastructure_failure: this.#tally.count('infrastructure_failure'),
      fatal: this.#tally.count('fatal'),
      provider_stop: this.#tally.count('provider_stop'),
      harness_failure: this.#tally.count('harness_failure'),
    };
  }

  finishedCount(): number {
    return this.#tally.total();
  }

  /** The usable GPU peaks as the dispatch rule reads them: the largest, or none. */
  gpuPeaks(): number[] {
    return this.#tally.gpuPeaks();
  }

  /** The most recent failed pairs, newest first (at most FAILED_SHOWN). */
  failedRecent(): FailedPair[] {
    return this.#tally.failedRecent();
  }

  /** The allowlisted pairs' attempts (issue 42); null when none finished. */
  egress(): EgressStatus | null {
    return this.#tally.egress();
  }

  /** Mean duration (seconds) of the finished pairs with a usable duration, and how many; null before the first. */
  meanDuration(): { readonly meanSec: number; readonly basisPairs: number } | null {
    return this.#tally.meanDuration();
  }

  basis(): LedgerBasis {
    const tally = this.#tally.basisFields();
    return {
      schema: BASIS_SCHEMA,
      journal_seq: this.#seq,
      journal_bytes: this.#bytes,
      total: this.#total,
      claimed: this.#claimed,
      finished: tally.finished,
      duration_ms: tally.duration_ms,
      timed: tally.timed,
      gpu_peak_mib: tally.gpu_peak_mib,
      gpu_peaks: tally.gpu_peaks,
      open: this.open(),
      fold: this.#folder.state(),
      failed_recent: tally.failed_recent,
      ...(tally.egress !== undefined ? { egress: tally.egress } : {}),
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
    this.#tally.add(jobId, facts);
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
    this.#tally.remove(jobId, entry.facts, this.#finishedFacts());
  }

  *#finishedFacts(): Iterable<FinishFacts> {
    for (const e of this.#entries.values()) if (e.kind === 'finished') yield e.facts;
  }
}
