import type { SecretMachine } from './secret-machine.js';
import { FINAL } from './secret-machine.js';

export const SECRET_MASK = '[REDACTED]';

/** At stream end, a held tail this long that begins a secret form is masked, not written. */
export const MIN_MASKED_PREFIX = 4;

/**
 * First index >= from whose byte and the next one can begin a match (the last index when none):
 * every byte skipped here cannot start a thread that survives its successor.
 */
function nextCandidate(s: string, from: number, machine: SecretMachine): number {
  const { window, shift, firstPairs } = machine;
  if (window < 3) return nextPairCandidate(s, from, firstPairs);
  const last = s.length - 1;
  let start = from;
  for (;;) {
    const p = start + window - 1;
    // The last window - 1 bytes cannot be ruled out by a whole window: the pair filter decides.
    if (p > last) return nextPairCandidate(s, start, firstPairs);
    const step = shift[(s.charCodeAt(p - 1) << 8) | s.charCodeAt(p)] ?? 0;
    if (step > 0) start += step;
    else if (firstPairs[(s.charCodeAt(start) << 8) | s.charCodeAt(start + 1)] === 1) return start;
    else start++;
  }
}

/** The same with the first-pair filter alone (one lookup per byte). */
function nextPairCandidate(s: string, from: number, firstPairs: Uint8Array): number {
  const last = s.length - 1;
  let high = s.charCodeAt(from) << 8;
  for (let i = from; i < last; i++) {
    const next = s.charCodeAt(i + 1);
    if (firstPairs[high | next] === 1) return i;
    high = next << 8;
  }
  return last;
}

/**
 * The node marks of one machine's steps, shared by every stage of it: a step runs to its end before any other
 * begins (single-threaded, synchronous), and each takes a generation no other step had, so one array serves them all.
 * Per stage, it was 4 bytes a node of every redactor made (with its thread arrays, 28): 22 MB and some 40 ms for each
 * stream of an exec of a session with 16 KB of secrets (issue 39, twelfth stop).
 */
interface NodeMarks {
  readonly stamp: Int32Array;
  generation: number;
}
const MARKS = new WeakMap<SecretMachine, NodeMarks>();

function marksOf(machine: SecretMachine): NodeMarks {
  let marks = MARKS.get(machine);
  if (marks === undefined) {
    marks = { stamp: new Int32Array(Math.max(1, machine.nodeCount)), generation: 0 };
    MARKS.set(machine, marks);
  }
  return marks;
}

/** Live threads a stage starts with room for; grown (doubling, up to the machine's nodes) as a step needs. */
const INITIAL_THREADS = 64;

/**
 * Streaming matcher of secret forms over latin1 text (one char per byte). Every input byte is
 * looked at once: a fast loop skips bytes whose pair with the next byte cannot begin a match,
 * the automaton steps the rest. Only the bytes of threads still alive are held back (at most
 * the longest form's span), so neither memory nor work per byte depends on the input.
 * Overlapping matches merge into one mask; the output does not depend on how the input is chunked.
 */
export class SecretStage {
  readonly #machine: SecretMachine;
  /** Absolute offset of the first held char. */
  #base = 0;
  #held = '';
  /** Bytes before this absolute offset that belong to a mask already written are dropped. */
  #maskedUntil = 0;
  /** Matched regions not yet written, [start, end) pairs sorted by start, disjoint. */
  #regions: number[] = [];
  // Threads: node and absolute start, ordered by start; the machine's marks dedupe nodes per step.
  #nodes: Int32Array;
  #starts: Float64Array;
  #count = 0;
  #nextNodes: Int32Array;
  #nextStarts: Float64Array;
  readonly #marks: NodeMarks;

  constructor(machine: SecretMachine) {
    this.#machine = machine;
    const size = Math.min(INITIAL_THREADS, Math.max(1, machine.nodeCount));
    this.#nodes = new Int32Array(size);
    this.#starts = new Float64Array(size);
    this.#nextNodes = new Int32Array(size);
    this.#nextStarts = new Float64Array(size);
    this.#marks = marksOf(machine);
  }

  get pendingLength(): number {
    return this.#held.length;
  }

  /** Back to the state of a new stage, keeping the allocated thread arrays. */
  reset(): void {
    this.#base = 0;
    this.#held = '';
    this.#maskedUntil = 0;
    this.#regions = [];
    this.#count = 0;
  }

  /** Text safe to write now (the very `chunk` when it passes unchanged and nothing was held). */
  push(chunk: string): string {
    if (chunk.length === 0) return '';
    if (this.#machine.nodeCount === 0) return chunk;
    const quiet = this.#held.length === 0 && this.#regions.length === 0 && this.#maskedUntil <= this.#base;
    const s = this.#held.length === 0 ? chunk : this.#held + chunk;
    const offset = this.#held.length; // index in s of the chunk's first char
    const machine = this.#machine;
    const len = s.length;
    for (let i = offset; i < len; i++) {
      if (this.#count === 0) i = nextCandidate(s, i, machine);
      this.#step(s.charCodeAt(i), this.#base + i);
    }
    if (quiet && this.#count === 0 && this.#regions.length === 0) {
      this.#base += len;
      return chunk;
    }
    const boundary = this.#count > 0 ? (this.#starts[0] ?? this.#base + len) : this.#base + len;
    return this.#emit(s, boundary);
  }

  /** Everything held; a tail of MIN_MASKED_PREFIX+ bytes that begins a form is masked. */
  end(): string {
    if (this.#held.length === 0 && this.#regions.length === 0) return '';
    const s = this.#held;
    const endOffset = this.#base + s.length;
    const first = this.#count > 0 ? (this.#starts[0] ?? endOffset) : endOffset;
    if (this.#count > 0 && endOffset - first >= MIN_MASKED_PREFIX) this.#addRegion(first, endOffset);
    this.#count = 0;
    return this.#emit(s, endOffset);
  }

  /** Advances every thread by one byte and starts the threads this byte begins. */
  #step(b: number, at: number): void {
    const m = this.#machine;
    const { accept1, accept2, successorStart, successors } = m;
    const marks = this.#marks;
    // Int32 marks: before the generation could wrap, every mark is cleared (once in 2^31 steps of the machine).
    if (marks.generation === 0x7fffffff) {
      marks.stamp.fill(0);
      marks.generation = 0;
    }
    const gen = ++marks.generation;
    const stamp = marks.stamp;
    const nodes = this.#nodes;
    const starts = this.#starts;
    let nextNodes = this.#nextNodes;
    let nextStarts = this.#nextStarts;
    const count = this.#count;
    const firstStart = m.startOffset[b] ?? 0;
    const lastStart = m.startOffset[b + 1] ?? 0;
    let k = 0;
    // Live threads first (earliest start first), then the ones starting here: a node reached twice
    // keeps its earliest start.
    for (let i = 0; i < count + lastStart - firstStart; i++) {
      let node: number;
      let start: number;
      if (i < count) {
        node = nodes[i] ?? 0;
        if (accept1[node] !== b && accept2[node] !== b) continue;
        start = starts[i] ?? at;
      } else {
        node = m.starts[firstStart + i - count] ?? 0;
        start = at;
      }
      for (let j = successorStart[node] ?? 0, stop = successorStart[node + 1] ?? 0; j < stop; j++) {
        const successor = successors[j] ?? FINAL;
        if (successor === FINAL) {
          this.#addRegion(start, at + 1);
        } else if (stamp[successor] !== gen) {
          stamp[successor] = gen;
          if (k === nextNodes.length) {
            // Never past the machine's nodes: the marks keep one thread a node.
            const size = Math.min(Math.max(1, m.nodeCount), k * 2);
            const grownNodes = new Int32Array(size);
            const grownStarts = new Float64Array(size);
            grownNodes.set(nextNodes);
            grownStarts.set(nextStarts);
            nextNodes = grownNodes;
            nextStarts = grownStarts;
          }
          nextNodes[k] = successor;
          nextStarts[k] = start;
          k++;
        }
      }
    }
    this.#nodes = nextNodes;
    this.#starts = nextStarts;
    this.#nextNodes = nodes;
    this.#nextStarts = starts;
    this.#count = k;
  }

  /**
   * Adds [start, end), merged with every pending region it overlaps. Touching regions stay apart (two
   * masks): whether the first was already written when the second is found depends on chunking, and the
   * output must not (a reattach re-reads the log and skips the bytes already kept).
   */
  #addRegion(start: number, end: number): void {
    const r = this.#regions;
    const lastEnd = r[r.length - 1];
    if (lastEnd === undefined || lastEnd <= start) {
      r.push(start, end);
      return;
    }
    let s = start;
    let e = end;
    const kept: number[] = [];
    for (let i = 0; i < r.length; i += 2) {
      const rs = r[i] ?? 0;
      const re = r[i + 1] ?? 0;
      if (re <= s || rs >= e) kept.push(rs, re);
      else {
        s = Math.min(s, rs);
        e = Math.max(e, re);
      }
    }
    let at = kept.length;
    while (at > 0 && (kept[at - 2] ?? 0) > s) at -= 2;
    kept.splice(at, 0, s, e);
    this.#regions = kept;
  }

  /** Writes [base, boundary) with regions masked; keeps the rest held. */
  #emit(s: string, boundary: number): string {
    let out = '';
    let cursor = this.#base;
    const regions = this.#regions;
    let used = 0;
    while (used < regions.length && (regions[used] ?? Infinity) < boundary) {
      const start = regions[used] ?? 0;
      const end = regions[used + 1] ?? 0;
      const from = Math.max(cursor, this.#maskedUntil);
      if (start > from) out += s.slice(from - this.#base, start - this.#base);
      if (start >= this.#maskedUntil) out += SECRET_MASK;
      this.#maskedUntil = Math.max(this.#maskedUntil, end);
      cursor = Math.max(cursor, start);
      used += 2;
    }
    if (used > 0) this.#regions = regions.slice(used);
    const from = Math.max(cursor, this.#maskedUntil);
    if (boundary > from) out += s.slice(from - this.#base, boundary - this.#base);
    this.#held = s.slice(boundary - this.#base);
    this.#base = boundary;
    return out;
  }
}
