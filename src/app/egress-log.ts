import { join } from 'node:path';
import { EGRESS_FILE } from '../core/evidence-names.js';
import type { EgressRecord } from '../core/egress/record.js';
import type { Clock } from './ports/clock.js';
import type { EvidenceStore } from './evidence/evidence-store.js';
import type { LogSink } from './evidence/log-sink.js';

/** Records kept per pair in `egress.jsonl`; past it they are counted (`dropped`). */
export const MAX_EGRESS_RECORDS = 20_000;

/**
 * A pair's `egress.jsonl` as the attempts happen (docs/spec.md §5.6): one masked JSON line per record, handed to
 * write(2) as it arrives (no block held), in a file opened for appending, so that a supervisor killed mid-pair loses
 * nothing already recorded and the one that reattaches the pair appends after it. The file is the record: the
 * summary in result.json is read back from it (`summaryOf`).
 */
export class EgressLog {
  readonly #sink: LogSink;
  readonly #redact: (text: string) => string;
  #lines: number;
  #dropped = 0;

  private constructor(sink: LogSink, redact: (text: string) => string, lines: number) {
    this.#sink = sink;
    this.#redact = redact;
    this.#lines = lines;
  }

  /** Opened for appending (created when missing); the lines already there count against the cap. */
  static async open(
    store: EvidenceStore,
    jobRel: string,
    redact: (text: string) => string,
    clock: Pick<Clock, 'setTimer'>,
  ): Promise<EgressLog> {
    const rel = join(jobRel, EGRESS_FILE);
    const before = await store.readBytes(rel).catch(() => null);
    const lines = before === null ? 0 : countLines(before);
    const sink = await store.openLog(rel, { append: true, blockBytes: 0, clock });
    sink.on('error', () => undefined);
    return new EgressLog(sink, redact, lines);
  }

  append(record: EgressRecord): void {
    if (this.#lines >= MAX_EGRESS_RECORDS) {
      this.#dropped += 1;
      return;
    }
    this.#lines += 1;
    this.#sink.write(`${JSON.stringify(maskRecord(record, this.#redact))}\n`);
  }

  get dropped(): number {
    return this.#dropped;
  }

  /** Every accepted line written, fsynced and the file closed. */
  async close(): Promise<void> {
    await this.#sink.finish();
  }
}

function countLines(bytes: Uint8Array): number {
  let n = 0;
  for (const b of bytes) if (b === 0x0a) n += 1;
  return n;
}

/** The records of an `egress.jsonl` (a torn last line, from a kill mid-write, is left out). */
export function parseEgressLines(text: string): EgressRecord[] {
  const records: EgressRecord[] = [];
  for (const line of text.split('\n')) {
    if (line === '') continue;
    try {
      records.push(JSON.parse(line) as EgressRecord);
    } catch {
      // A line cut by a kill mid-write: not a record.
    }
  }
  return records;
}

/** Every text of a record masked (a URL or a DNS name can carry a secret). */
export function maskRecord(record: EgressRecord, redact: (text: string) => string): EgressRecord {
  return {
    ...record,
    host: record.host === null ? null : redact(record.host),
    ...(record.target !== undefined ? { target: redact(record.target) } : {}),
    ...(record.sni !== undefined && record.sni !== null ? { sni: redact(record.sni) } : {}),
  };
}

/** One JSON line per record, every text masked (a URL or a DNS name can carry a secret). */
export function egressLines(records: readonly EgressRecord[], redact: (text: string) => string): string {
  return records.map((r) => `${JSON.stringify(maskRecord(r, redact))}\n`).join('');
}
