/**
 * The secret machine's builder as it was before its typed-array rewrite (issue 39, twelfth stop): kept here as the
 * oracle the rewrite must equal, array for array (test/unit/redaction-machine-builder.test.ts). Test code only.
 */
import type { SecretForm } from '../../src/core/redaction/secret-forms.js';
import { secretForms, unitsOf } from '../../src/core/redaction/secret-forms.js';

/**
 * Every form of every secret compiled into one byte automaton (a Thompson NFA without epsilon
 * moves): node n accepts the byte `accept1[n]` or `accept2[n]`, then moves to its successors
 * (`FINAL` = a form is complete). Scanning keeps at most one thread per node (the earliest
 * start wins), so the work per input byte is bounded by the number of nodes, whatever the input.
 */
const FINAL = -1;

interface SecretMachine {
  readonly nodeCount: number;
  readonly accept1: Int16Array;
  readonly accept2: Int16Array;
  /** Successors of node n: `successors[successorStart[n] .. successorStart[n + 1])`. */
  readonly successorStart: Int32Array;
  readonly successors: Int32Array;
  /** Nodes a form starts with, by the byte they accept: `starts[startOffset[b] .. startOffset[b + 1])`. */
  readonly startOffset: Int32Array;
  readonly starts: Int32Array;
  /**
   * 1 where the byte pair (b0 << 8 | b1) can be the first two bytes of a match, or b0 is a whole
   * one-byte match: a scan skips every other byte.
   */
  readonly firstPairs: Uint8Array;
  /** Bytes the longest form can span (line breaks included): no thread lives longer. */
  readonly maxSpan: number;
  /**
   * Wu-Manber skip over possible match starts: for the byte pair ending a window of `window`
   * bytes, how far the window can move without passing over the start of a match (0: a match may
   * start at the window's first byte). `window` < 3 means no skipping (very short values).
   */
  readonly window: number;
  readonly shift: Uint8Array;
}

const MAX_WINDOW = 16;

/**
 * The Wu-Manber table from the nodes reachable after j bytes (j < window): every pair a match can
 * hold at offsets (j, j + 1) gets a shift of at most window - 2 - j.
 */
function shiftTable(b: Builder, minLength: number): { window: number; shift: Uint8Array } {
  const window = Math.min(MAX_WINDOW, minLength);
  const shift = new Uint8Array(65536).fill(Math.max(0, window - 1));
  if (window < 3) return { window, shift: shift.fill(0) };
  let reach = new Set(b.startNodes);
  for (let j = 0; j + 1 < window; j++) {
    const next = new Set<number>();
    for (const n of reach) {
      for (const m of b.next[n] ?? []) {
        if (m === FINAL) continue;
        next.add(m);
        for (const x of [b.accept1[n] ?? 0, b.accept2[n] ?? 0]) {
          for (const y of [b.accept1[m] ?? 0, b.accept2[m] ?? 0]) {
            const pair = (x << 8) | y;
            shift[pair] = Math.min(shift[pair] ?? 0, window - 2 - j);
          }
        }
      }
    }
    reach = next;
  }
  return { window, shift };
}

class Builder {
  readonly accept1: number[] = [];
  readonly accept2: number[] = [];
  readonly next: number[][] = [];
  readonly startNodes: number[] = [];
  maxSpan = 0;
  minLength = Infinity;

  node(bytes: readonly number[]): number {
    this.accept1.push(bytes[0] ?? -1);
    this.accept2.push(bytes[1] ?? bytes[0] ?? -1);
    this.next.push([]);
    return this.accept1.length - 1;
  }

  /** Chains of nodes per alternative of each unit; the ends of unit u lead to the starts of unit u+1. */
  add(form: SecretForm): void {
    let previousEnds: number[] = [];
    let span = 0;
    let least = 0;
    unitsOf(form).forEach((unit, u) => {
      const starts: number[] = [];
      const ends: number[] = [];
      for (const alternative of unit) {
        let last = -1;
        for (const bytes of alternative) {
          const id = this.node(bytes);
          if (last >= 0) this.next[last]?.push(id);
          else starts.push(id);
          last = id;
        }
        if (last >= 0) ends.push(last);
      }
      span += Math.max(...unit.map((alternative) => alternative.length));
      if (u < (form.optionalFrom ?? Infinity))
        least += Math.min(...unit.map((alternative) => alternative.length));
      // An optional suffix: the match may also end before this unit.
      else for (const end of previousEnds) this.next[end]?.push(FINAL);
      if (u === 0) this.startNodes.push(...starts);
      for (const end of previousEnds) this.next[end]?.push(...starts);
      if (form.lineBreaks && u > 1) {
        const lf = this.node([10]);
        const cr = this.node([13]);
        this.next[cr]?.push(lf);
        this.next[lf]?.push(...starts);
        for (const end of previousEnds) this.next[end]?.push(cr, lf);
        span += 2;
      }
      previousEnds = ends;
    });
    for (const end of previousEnds) this.next[end]?.push(FINAL);
    this.maxSpan = Math.max(this.maxSpan, span);
    this.minLength = Math.min(this.minLength, least);
  }

  build(): SecretMachine {
    const nodeCount = this.accept1.length;
    const successorStart = new Int32Array(nodeCount + 1);
    const flat: number[] = [];
    for (let n = 0; n < nodeCount; n++) {
      successorStart[n] = flat.length;
      flat.push(...(this.next[n] ?? []));
    }
    successorStart[nodeCount] = flat.length;
    const byByte: number[][] = Array.from({ length: 256 }, () => []);
    const firstPairs = new Uint8Array(65536);
    for (const start of this.startNodes) {
      const firsts = new Set([this.accept1[start] ?? -1, this.accept2[start] ?? -1]);
      for (const b0 of firsts) {
        byByte[b0]?.push(start);
        for (const successor of this.next[start] ?? []) {
          if (successor === FINAL) {
            firstPairs.fill(1, b0 << 8, (b0 + 1) << 8);
            continue;
          }
          firstPairs[(b0 << 8) | (this.accept1[successor] ?? 0)] = 1;
          firstPairs[(b0 << 8) | (this.accept2[successor] ?? 0)] = 1;
        }
      }
    }
    const startOffset = new Int32Array(257);
    const starts: number[] = [];
    for (let b = 0; b < 256; b++) {
      startOffset[b] = starts.length;
      starts.push(...(byByte[b] ?? []));
    }
    startOffset[256] = starts.length;
    return {
      nodeCount,
      accept1: Int16Array.from(this.accept1),
      accept2: Int16Array.from(this.accept2),
      successorStart,
      successors: Int32Array.from(flat),
      startOffset,
      starts: Int32Array.from(starts),
      firstPairs,
      maxSpan: this.maxSpan,
      ...shiftTable(this, this.minLength === Infinity ? 0 : this.minLength),
    };
  }
}

export function referenceSecretMachine(secrets: readonly string[]): SecretMachine {
  const builder = new Builder();
  for (const secret of new Set(secrets)) for (const form of secretForms(secret)) builder.add(form);
  return builder.build();
}
