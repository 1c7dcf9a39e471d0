import type { SecretForm } from './secret-forms.js';
import { secretFormsOf, utf8Length } from './secret-forms.js';

/**
 * Every form of every secret compiled into one byte automaton (a Thompson NFA without epsilon
 * moves): node n accepts the byte `accept1[n]` or `accept2[n]`, then moves to its successors
 * (`FINAL` = a form is complete). Scanning keeps at most one thread per node (the earliest
 * start wins), so the work per input byte is bounded by the number of nodes, whatever the input.
 */
export const FINAL = -1;

export interface SecretMachine {
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
 * Work (nodes and edges made) between two yields of a compile taken in steps: about a millisecond on a 2-core machine,
 * so a caller that pauses at every yield never holds its event loop long (issue 39).
 */
const WORK_PER_STEP = 8192;
/** Edges laid out between two yields of the layout (a plain loop over typed arrays: a millisecond or two). */
const EDGES_PER_STEP = 131_072;

/**
 * The Wu-Manber table from the nodes reachable after j bytes (j < window): every pair a match can
 * hold at offsets (j, j + 1) gets a shift of at most window - 2 - j.
 */
function shiftTable(b: Built, minLength: number): { window: number; shift: Uint8Array } {
  const window = Math.min(MAX_WINDOW, minLength);
  const shift = new Uint8Array(65536).fill(Math.max(0, window - 1));
  if (window < 3) return { window, shift: shift.fill(0) };
  let reach = new Set(b.startNodes);
  for (let j = 0; j + 1 < window; j++) {
    const next = new Set<number>();
    for (const n of reach) {
      for (let s = b.successorStart[n] ?? 0; s < (b.successorStart[n + 1] ?? 0); s++) {
        const m = b.successors[s] ?? FINAL;
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

/** The nodes and their successors in the machine's layout, before the start tables. */
interface Built {
  readonly startNodes: readonly number[];
  readonly accept1: Int16Array;
  readonly accept2: Int16Array;
  readonly successorStart: Int32Array;
  readonly successors: Int32Array;
}

function grown<T extends Int16Array | Int32Array>(array: T, make: (length: number) => T): T {
  const bigger = make(array.length * 2);
  bigger.set(array);
  return bigger;
}

/**
 * Nodes in typed arrays and edges in one list (from, to) in the order they are made; laid out per node at the end,
 * in that order (a stable counting sort). A secret of 4 KB is about 200,000 nodes: one small array per node, as
 * before, cost about 50 times the time and most of it in the garbage collector (issue 39, twelfth stop).
 */
class Builder {
  nodeCount = 0;
  edgeCount = 0;
  accept1: Int16Array;
  accept2: Int16Array;
  edgeFrom: Int32Array;
  edgeTo: Int32Array;
  readonly startNodes: number[] = [];
  maxSpan = 0;
  minLength = Infinity;
  /** Work done at the last yield. */
  #yielded = 0;

  /**
   * Sized for `bytes` of secrets at once: every form of a byte makes 43 to 50 nodes and 67 to 84 edges (measured on
   * random, escaped, multi-byte and control text). Doubling as it went, one copy of the largest arrays was a step of
   * 10 to 20 ms; grown still if a set ever needs more.
   */
  constructor(bytes: number) {
    const nodes = 1024 + 52 * bytes;
    const edges = 1024 + 86 * bytes;
    this.accept1 = new Int16Array(nodes);
    this.accept2 = new Int16Array(nodes);
    this.edgeFrom = new Int32Array(edges);
    this.edgeTo = new Int32Array(edges);
  }

  node(bytes: readonly number[]): number {
    if (this.nodeCount === this.accept1.length) {
      this.accept1 = grown(this.accept1, (n) => new Int16Array(n));
      this.accept2 = grown(this.accept2, (n) => new Int16Array(n));
    }
    this.accept1[this.nodeCount] = bytes[0] ?? -1;
    this.accept2[this.nodeCount] = bytes[1] ?? bytes[0] ?? -1;
    return this.nodeCount++;
  }

  edge(from: number, to: number): void {
    if (this.edgeCount === this.edgeFrom.length) {
      this.edgeFrom = grown(this.edgeFrom, (n) => new Int32Array(n));
      this.edgeTo = grown(this.edgeTo, (n) => new Int32Array(n));
    }
    this.edgeFrom[this.edgeCount] = from;
    this.edgeTo[this.edgeCount] = to;
    this.edgeCount += 1;
  }

  edges(from: readonly number[], to: readonly number[]): void {
    for (const f of from) for (const t of to) this.edge(f, t);
  }

  /** True once a step's work was done since the last yield (then counted from here). */
  due(): boolean {
    const work = this.nodeCount + this.edgeCount;
    if (work - this.#yielded < WORK_PER_STEP) return false;
    this.#yielded = work;
    return true;
  }

  /** Chains of nodes per alternative of each unit; the ends of unit u lead to the starts of unit u+1. */
  *add(form: SecretForm): Generator<void, void, void> {
    let previousEnds: number[] = [];
    let span = 0;
    let least = 0;
    for (let u = 0; u < form.unitCount; u++) {
      const unit = form.unitAt(u);
      const starts: number[] = [];
      const ends: number[] = [];
      for (const alternative of unit) {
        let last = -1;
        for (const bytes of alternative) {
          const id = this.node(bytes);
          if (last >= 0) this.edge(last, id);
          else starts.push(id);
          last = id;
        }
        if (last >= 0) ends.push(last);
      }
      let longest = 0;
      let shortest = Infinity;
      for (const alternative of unit) {
        longest = Math.max(longest, alternative.length);
        shortest = Math.min(shortest, alternative.length);
      }
      span += unit.length === 0 ? -Infinity : longest;
      if (u < (form.optionalFrom ?? Infinity)) least += unit.length === 0 ? Infinity : shortest;
      // An optional suffix: the match may also end before this unit.
      else this.edges(previousEnds, [FINAL]);
      if (u === 0) this.startNodes.push(...starts);
      this.edges(previousEnds, starts);
      if (form.lineBreaks && u > 1) {
        const lf = this.node([10]);
        const cr = this.node([13]);
        this.edge(cr, lf);
        this.edges([lf], starts);
        for (const end of previousEnds) {
          this.edge(end, cr);
          this.edge(end, lf);
        }
        span += 2;
      }
      previousEnds = ends;
      if (this.due()) yield;
    }
    this.edges(previousEnds, [FINAL]);
    this.maxSpan = Math.max(this.maxSpan, span);
    this.minLength = Math.min(this.minLength, least);
  }

  /** The successors laid out per node, each node's in the order they were made. */
  *layout(): Generator<void, Built, void> {
    const nodeCount = this.nodeCount;
    const successorStart = new Int32Array(nodeCount + 1);
    for (let e = 0; e < this.edgeCount; e++) {
      const slot = (this.edgeFrom[e] ?? 0) + 1;
      successorStart[slot] = (successorStart[slot] ?? 0) + 1;
      if (e % EDGES_PER_STEP === EDGES_PER_STEP - 1) yield;
    }
    for (let n = 0; n < nodeCount; n++)
      successorStart[n + 1] = (successorStart[n + 1] ?? 0) + (successorStart[n] ?? 0);
    yield;
    const cursor = successorStart.slice(0, nodeCount);
    const successors = new Int32Array(this.edgeCount);
    for (let e = 0; e < this.edgeCount; e++) {
      const from = this.edgeFrom[e] ?? 0;
      successors[cursor[from] ?? 0] = this.edgeTo[e] ?? FINAL;
      cursor[from] = (cursor[from] ?? 0) + 1;
      if (e % EDGES_PER_STEP === EDGES_PER_STEP - 1) yield;
    }
    yield;
    return {
      startNodes: this.startNodes,
      accept1: this.accept1.slice(0, nodeCount),
      accept2: this.accept2.slice(0, nodeCount),
      successorStart,
      successors,
    };
  }

  *build(): Generator<void, SecretMachine, void> {
    const built = yield* this.layout();
    const { accept1, accept2, successorStart, successors } = built;
    const byByte: number[][] = Array.from({ length: 256 }, () => []);
    const firstPairs = new Uint8Array(65536);
    for (const start of this.startNodes) {
      const firsts = new Set([accept1[start] ?? -1, accept2[start] ?? -1]);
      for (const b0 of firsts) {
        byByte[b0]?.push(start);
        for (let s = successorStart[start] ?? 0; s < (successorStart[start + 1] ?? 0); s++) {
          const successor = successors[s] ?? FINAL;
          if (successor === FINAL) {
            firstPairs.fill(1, b0 << 8, (b0 + 1) << 8);
            continue;
          }
          firstPairs[(b0 << 8) | (accept1[successor] ?? 0)] = 1;
          firstPairs[(b0 << 8) | (accept2[successor] ?? 0)] = 1;
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
    yield;
    return {
      nodeCount: this.nodeCount,
      accept1,
      accept2,
      successorStart,
      successors,
      startOffset,
      starts: Int32Array.from(starts),
      firstPairs,
      maxSpan: this.maxSpan,
      ...shiftTable(built, this.minLength === Infinity ? 0 : this.minLength),
    };
  }
}

/** The compile as steps of bounded work: it yields between them and returns the machine. */
function* machineSteps(secrets: readonly string[]): Generator<void, SecretMachine, void> {
  const distinct = new Set(secrets);
  let bytes = 0;
  for (const secret of distinct) bytes += utf8Length(secret);
  const builder = new Builder(bytes);
  for (const secret of distinct) {
    for (const form of secretFormsOf(secret)) {
      yield* builder.add(form);
      if (builder.due()) yield;
    }
  }
  return yield* builder.build();
}

export function compileSecretMachine(secrets: readonly string[]): SecretMachine {
  const steps = machineSteps(secrets);
  for (;;) {
    const step = steps.next();
    if (step.done === true) return step.value;
  }
}

/**
 * The same machine, compiled a step at a time with `pause()` awaited between steps (serve passes one turn of its
 * event loop): the work is the same, and no step holds the caller's loop for more than about a millisecond. A secret
 * of 4 KB is some 200,000 nodes (issue 39).
 */
export async function compileSecretMachineInSteps(
  secrets: readonly string[],
  pause: () => Promise<void>,
): Promise<SecretMachine> {
  const steps = machineSteps(secrets);
  for (;;) {
    const step = steps.next();
    if (step.done === true) return step.value;
    await pause();
  }
}
