import { isObject } from '../../core/json-object.js';
import { JOURNAL_FILE, STATUS_FILE, SUPERVISOR_FILE } from '../../core/evidence-names.js';
import { knownEntry, type JournalRecord } from '../../core/journal-events.js';
import { PAIR_PHASES } from '../../core/pair-phases.js';
import {
  CLASSIFICATIONS,
  type Classification,
  type ResultRecord,
  isResultRecord,
} from '../../core/result.js';
import { secondsBetween, type BatchSnapshot, type FinishedPair } from '../../core/metrics/host-snapshot.js';
import { isSupervisorRecord } from '../../core/supervisor-record.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import type { FileInfo, FileSystem } from '../ports/file-system.js';
import type { HostIdentity } from '../ports/host-identity.js';
import type { BatchStatus } from '../batch/status-shapes.js';
import { resultRel } from '../batch/layout.js';

export interface BatchWatchDeps {
  readonly fs: Pick<FileSystem, 'lstat'>;
  readonly host: Pick<HostIdentity, 'isAlive'>;
  /** `e1-batch status`'s own reader without an engine (read-only: nothing is rewritten). */
  readonly readStatus: (store: EvidenceStore, now: Date) => Promise<BatchStatus>;
  /** A status unchanged on disk is derived again after this long (its ETA counts from now). Default 30 s. */
  readonly refreshMs?: number;
}

/** size, time and identity of the files a status rests on, and whether the supervisor lives: the cache key. */
function keyOf(infos: readonly (FileInfo | null)[], alive: boolean): string {
  return `${alive}|${infos.map((i) => (i === null ? '-' : `${i.fileId}:${i.sizeBytes}:${i.modifiedMs}`)).join('|')}`;
}

function isClassification(value: unknown): value is Classification {
  return typeof value === 'string' && (CLASSIFICATIONS as readonly string[]).includes(value);
}

/**
 * One batch folder seen by the exporter (issue 45), read-only and incrementally: the journal from the offset the
 * last scan ended at (again from the start when the file was replaced or cut), each finished pair's result.json
 * once (on its `pair_finished` record), and `e1-batch status`'s derivation only when status.json, the journal or
 * supervisor.json changed (size, time, identity), the supervisor's liveness changed, or `refreshMs` passed. What a
 * scan costs therefore grows with what changed since the last one, never with the batch.
 */
export class BatchWatch {
  readonly #deps: BatchWatchDeps;
  readonly #store: EvidenceStore;
  #journal: {
    fileId: string | undefined;
    offset: number;
    modifiedMs: number | undefined;
    lastSeq: number;
  } | null = null;
  /** Jobs whose last removal record says "not proven gone". */
  readonly #unverified = new Set<string>();
  #status: { key: string; atMs: number; status: BatchStatus } | null = null;

  constructor(deps: BatchWatchDeps, store: EvidenceStore) {
    this.#deps = deps;
    this.#store = store;
  }

  get root(): string {
    return this.#store.root;
  }

  async #info(rel: string): Promise<FileInfo | null> {
    return this.#deps.fs.lstat(this.#store.resolve(rel)).catch(() => null);
  }

  async scan(now: Date): Promise<BatchSnapshot> {
    const [statusInfo, journalInfo, supervisorInfo] = await Promise.all([
      this.#info(STATUS_FILE),
      this.#info(JOURNAL_FILE),
      this.#info(SUPERVISOR_FILE),
    ]);
    const { finished, reset } = await this.#foldJournal(journalInfo);
    const supervisor = await this.#store.readJson(SUPERVISOR_FILE, isSupervisorRecord).catch(() => null);
    const alive = supervisor !== null && this.#deps.host.isAlive(supervisor);
    const key = keyOf([statusInfo, journalInfo, supervisorInfo], alive);
    const fresh =
      this.#status !== null &&
      this.#status.key === key &&
      now.getTime() - this.#status.atMs < (this.#deps.refreshMs ?? 30_000);
    if (!fresh)
      this.#status = { key, atMs: now.getTime(), status: await this.#deps.readStatus(this.#store, now) };
    const status = this.#status!.status;
    const lastChangeMs = Math.max(
      ...[statusInfo, journalInfo, supervisorInfo].map((i) => i?.modifiedMs ?? -Infinity),
    );
    return {
      batchId: status.batch_id,
      state: status.state,
      pauseReasons: status.pause_reasons,
      pauseCauses: (status.pause_causes ?? []).map((c) => ({ reason: c.reason, code: c.code })),
      counts: status.counts,
      workersAllowed: status.workers_allowed,
      etaSec: status.eta?.remaining_sec ?? null,
      supervisor: {
        up: status.supervisor?.alive === true,
        heartbeatAgeSec: Number.isFinite(lastChangeMs)
          ? Math.max(0, (now.getTime() - lastChangeMs) / 1000)
          : null,
      },
      recentFailures: (status.failed?.pairs ?? []).map((p) => ({
        jobId: p.job_id,
        classification: p.classification,
        reason: p.reason ?? 'none',
      })),
      containersUnverified: this.#unverified.size,
      finished,
      reset,
    };
  }

  /**
   * The journal's records since the last scan. From the start (a reset) when it is another file, shorter, rewritten
   * at the same size (another time), or when what follows the offset does not continue the sequence (`seq`).
   */
  async #foldJournal(info: FileInfo | null): Promise<{ finished: FinishedPair[]; reset: boolean }> {
    const known = this.#journal;
    const same =
      known !== null && info !== null && known.fileId === info.fileId && info.sizeBytes >= known.offset;
    if (same && info.sizeBytes === known.offset && info.modifiedMs === known.modifiedMs)
      return { finished: [], reset: false };
    let slice =
      same && info.sizeBytes > known.offset ? await this.#store.readJournalFrom(known.offset) : null;
    if (slice !== null && slice.records[0] !== undefined && slice.records[0].seq !== known!.lastSeq + 1)
      slice = null;
    const reset = slice === null;
    const read = slice ?? (await this.#store.readJournalSlice());
    if (reset) this.#unverified.clear();
    this.#journal = {
      fileId: info?.fileId,
      offset: read.endBytes,
      modifiedMs: info?.modifiedMs,
      lastSeq: read.records.at(-1)?.seq ?? (reset ? 0 : known!.lastSeq),
    };
    const finished: FinishedPair[] = [];
    for (const record of read.records) {
      const pair = await this.#apply(record);
      if (pair !== null) finished.push(pair);
    }
    return { finished, reset: reset && known !== null };
  }

  async #apply(record: JournalRecord): Promise<FinishedPair | null> {
    const entry = knownEntry(record);
    if (entry === null || !('job_id' in entry)) return null;
    const jobId: unknown = entry.job_id;
    if (typeof jobId !== 'string') return null;
    if (entry.type === 'cleanup_retried') {
      if (entry.verified_absent === true) this.#unverified.delete(jobId);
      else this.#unverified.add(jobId);
      return null;
    }
    if (entry.type !== 'pair_finished' || !isClassification(entry.classification)) return null;
    const result = await this.#store.readJson(resultRel(jobId), isResultRecord).catch(() => null);
    if (result !== null && !result.cleanup.verified_absent) this.#unverified.add(jobId);
    else if (result !== null) this.#unverified.delete(jobId);
    return {
      classification: entry.classification,
      reasons: Array.isArray(entry.reasons) ? entry.reasons.filter((r) => typeof r === 'string') : [],
      durationSec: secondsBetween(entry.started_at, entry.finished_at),
      phasesSec: phasesOf(result),
      logBytes:
        result === null ? null : { stdout: result.logs.stdout.bytes, stderr: result.logs.stderr.bytes },
      outcomeRedactions: result?.outcome_redactions ?? 0,
    };
  }
}

function phasesOf(result: ResultRecord | null): FinishedPair['phasesSec'] {
  const phases: unknown = result?.phases;
  if (!isObject(phases)) return null;
  const out: Record<string, number> = {};
  for (const phase of PAIR_PHASES) {
    const ms = phases[`${phase}_ms`];
    if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) return null;
    out[phase] = ms / 1000;
  }
  return out as FinishedPair['phasesSec'];
}
