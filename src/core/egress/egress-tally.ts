/**
 * The batch's egress attempts as status counts them (docs/spec.md §5.6, "In status and the report"): per allowlisted
 * pair its allowed and refused attempts and the hosts it was refused (masked already: they come from result.json or
 * the journal, written masked), and the batch's totals. Pure. Bounded: the pairs with refusals kept are the most
 * recent EGRESS_PAIRS_SHOWN; the totals count every pair.
 */

/** What a finished allowlisted pair contributes (result.json `egress`, or the journal's `pair_finished`). */
export interface EgressFacts {
  readonly allowed: number;
  readonly refused: number;
  /** The hosts (or addresses) refused, `host:port`, at most EGRESS_HOSTS_KEPT. */
  readonly refused_hosts: readonly string[];
}

/** One pair's refusals as status lists them. */
export interface EgressPairLine extends EgressFacts {
  readonly job_id: string;
  readonly finished_at: string;
}

/** `status.egress`: the batch totals and the most recent pairs with refused attempts (newest first). */
export interface EgressStatus {
  /** Allowlisted pairs finished. */
  readonly pairs: number;
  readonly allowed: number;
  readonly refused: number;
  readonly refused_pairs: readonly EgressPairLine[];
  /** Pairs with refusals not listed (status keeps the most recent; the report lists every one). */
  readonly more: number;
  /**
   * The pairs still running, read live from their `egress.jsonl` (`e1-batch status` only; never in status.json):
   * not in the counts above, which are final. Absent when no running pair has an `egress.jsonl`.
   */
  readonly running?: EgressRunning;
}

/** What status.json keeps (its basis): the sums and the listed pairs, oldest first. */
export interface EgressBasis {
  readonly pairs: number;
  readonly allowed: number;
  readonly refused: number;
  readonly with_refusals: number;
  readonly recent: readonly EgressPairLine[];
}

export const EGRESS_PAIRS_SHOWN = 10;
export const EGRESS_HOSTS_KEPT = 20;

/** The facts of a result's or a record's `egress` (counts and refused hosts), or null when absent or malformed. */
export function egressFactsOf(value: unknown): EgressFacts | null {
  if (typeof value !== 'object' || value === null) return null;
  const v = value as { allowed?: unknown; refused?: unknown; refused_hosts?: unknown };
  const count = (n: unknown) => typeof n === 'number' && Number.isInteger(n) && n >= 0;
  if (!count(v.allowed) || !count(v.refused)) return null;
  const hosts = Array.isArray(v.refused_hosts)
    ? v.refused_hosts.filter((h): h is string => typeof h === 'string')
    : [];
  return {
    allowed: v.allowed as number,
    refused: v.refused as number,
    refused_hosts: hosts.slice(0, EGRESS_HOSTS_KEPT),
  };
}

/** `{egress}` for a spread, when `value` holds egress facts; `{}` otherwise. */
export function egressEntry(value: unknown): { egress?: EgressFacts } {
  const facts = egressFactsOf(value);
  return facts !== null ? { egress: facts } : {};
}

export class EgressTally {
  #pairs = 0;
  #allowed = 0;
  #refused = 0;
  #withRefusals = 0;
  /** Oldest first, at most EGRESS_PAIRS_SHOWN. */
  #recent: EgressPairLine[] = [];

  static restore(basis: unknown): EgressTally {
    const tally = new EgressTally();
    if (typeof basis !== 'object' || basis === null) return tally;
    const b = basis as Partial<EgressBasis>;
    tally.#pairs = typeof b.pairs === 'number' ? b.pairs : 0;
    tally.#allowed = typeof b.allowed === 'number' ? b.allowed : 0;
    tally.#refused = typeof b.refused === 'number' ? b.refused : 0;
    tally.#withRefusals = typeof b.with_refusals === 'number' ? b.with_refusals : 0;
    const recent: unknown = b.recent;
    tally.#recent = Array.isArray(recent) ? (recent as EgressPairLine[]).slice(-EGRESS_PAIRS_SHOWN) : [];
    return tally;
  }

  add(jobId: string, finishedAt: string, facts: EgressFacts): void {
    this.#pairs++;
    this.#allowed += facts.allowed;
    this.#refused += facts.refused;
    if (facts.refused === 0) return;
    this.#withRefusals++;
    this.#recent = this.#recent.filter((p) => p.job_id !== jobId);
    this.#recent.push({ job_id: jobId, finished_at: finishedAt, ...facts });
    this.#recent.sort(
      (a, b) => a.finished_at.localeCompare(b.finished_at) || a.job_id.localeCompare(b.job_id),
    );
    if (this.#recent.length > EGRESS_PAIRS_SHOWN) this.#recent.shift();
  }

  remove(jobId: string, facts: EgressFacts): void {
    this.#pairs--;
    this.#allowed -= facts.allowed;
    this.#refused -= facts.refused;
    if (facts.refused > 0) this.#withRefusals--;
    this.#recent = this.#recent.filter((p) => p.job_id !== jobId);
  }

  /** Null when no allowlisted pair has finished (status then has no `egress`). */
  status(): EgressStatus | null {
    if (this.#pairs === 0) return null;
    return {
      pairs: this.#pairs,
      allowed: this.#allowed,
      refused: this.#refused,
      refused_pairs: [...this.#recent].reverse(),
      more: Math.max(0, this.#withRefusals - this.#recent.length),
    };
  }

  basis(): EgressBasis | undefined {
    if (this.#pairs === 0) return undefined;
    return {
      pairs: this.#pairs,
      allowed: this.#allowed,
      refused: this.#refused,
      with_refusals: this.#withRefusals,
      recent: [...this.#recent],
    };
  }
}

/** One running pair's attempts so far. */
export interface EgressRunningPair extends EgressFacts {
  readonly job_id: string;
  /** Always true: live figures (the pair has not finished; its final counts come with its result). */
  readonly running: true;
  /** The file was longer than EGRESS_LIVE_READ_BYTES: the counts are those of its last records only. */
  readonly partial?: true;
}

/** `status.egress.running`: the running allowlisted pairs (those with an `egress.jsonl`) and their attempts so far. */
export interface EgressRunning {
  readonly pairs: number;
  readonly allowed: number;
  readonly refused: number;
  /** Every running pair refused something (at most the batch's workers), in the order status lists them. */
  readonly refused_pairs: readonly EgressRunningPair[];
  /** Some pair's counts are of its file's tail only. */
  readonly partial?: true;
}
