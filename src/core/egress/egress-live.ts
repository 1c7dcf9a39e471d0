/**
 * The attempts of the pairs still running, as `e1-batch status` counts them (docs/spec.md §5.6, "In status and the
 * report"): read from the tail of each running pair's `egress.jsonl` (masked on write), so they are live figures,
 * kept apart from the finished pairs' final ones (EgressTally). Pure: the caller reads the bytes.
 */
import { summarize, type EgressRecord } from './record.js';
import {
  EGRESS_HOSTS_KEPT,
  type EgressRunning,
  type EgressRunningPair,
  type EgressStatus,
} from './egress-tally.js';

/** The most bytes of a running pair's `egress.jsonl` status reads (its tail): 256 KiB, about a thousand records. */
export const EGRESS_LIVE_READ_BYTES = 256 * 1024;

/** A running pair's file as read: its tail, and whether the file was longer than the tail. */
export interface EgressTail {
  readonly job_id: string;
  readonly bytes: Uint8Array;
  readonly cut: boolean;
}

function isRecord(value: unknown): value is EgressRecord {
  if (typeof value !== 'object' || value === null) return false;
  const r = value as Partial<Record<keyof EgressRecord, unknown>>;
  return (
    (r.decision === 'allowed' || r.decision === 'refused') &&
    (r.host === null || typeof r.host === 'string') &&
    (r.address === null || r.address === undefined || typeof r.address === 'string') &&
    (r.port === null || r.port === undefined || typeof r.port === 'number')
  );
}

/**
 * The records of a tail: its first line left out when the file was cut there (`cut`), a torn last line (no newline
 * yet: a write in progress or a kill mid-write) and any line that is not a record left out.
 */
export function recordsOfTail(bytes: Uint8Array, cut: boolean): EgressRecord[] {
  let text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');
  if (cut) text = text.slice(text.indexOf('\n') + 1);
  const end = text.lastIndexOf('\n');
  const records: EgressRecord[] = [];
  for (const line of text.slice(0, end + 1).split('\n')) {
    if (line === '') continue;
    try {
      const value: unknown = JSON.parse(line);
      if (isRecord(value))
        records.push({ ...value, address: value.address ?? null, port: value.port ?? null });
    } catch {
      // Not a record (a line cut by a kill mid-write is only ever the last).
    }
  }
  return records;
}

/** The running pairs' attempts; null when none of them has an `egress.jsonl`. */
export function runningEgressOf(tails: readonly EgressTail[]): EgressRunning | null {
  if (tails.length === 0) return null;
  let allowed = 0;
  let refused = 0;
  let partial = false;
  const refusedPairs: EgressRunningPair[] = [];
  for (const tail of tails) {
    const summary = summarize('allowlist', recordsOfTail(tail.bytes, tail.cut));
    allowed += summary.allowed;
    refused += summary.refused;
    partial ||= tail.cut;
    if (summary.refused === 0) continue;
    refusedPairs.push({
      job_id: tail.job_id,
      running: true,
      allowed: summary.allowed,
      refused: summary.refused,
      refused_hosts: summary.refused_hosts.slice(0, EGRESS_HOSTS_KEPT),
      ...(tail.cut ? { partial: true as const } : {}),
    });
  }
  return {
    pairs: tails.length,
    allowed,
    refused,
    refused_pairs: refusedPairs,
    ...(partial ? { partial: true as const } : {}),
  };
}

/**
 * `status.egress` with the running pairs' attempts beside the finished ones' (`running`): the finished totals stay
 * final. A batch with running allowlisted pairs and none finished gets finished counts of zero.
 */
export function withRunning(
  egress: EgressStatus | undefined,
  running: EgressRunning | null,
): EgressStatus | undefined {
  if (running === null) return egress;
  return { ...(egress ?? { pairs: 0, allowed: 0, refused: 0, refused_pairs: [], more: 0 }), running };
}
