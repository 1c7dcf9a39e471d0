import { AUTHORIZATION, PRIVATE_KEY_BLOCK } from './header-detectors.js';
import type { SecretMachine } from './secret-machine.js';
import { compileSecretMachine, compileSecretMachineInSteps } from './secret-machine.js';
import { TOKEN_DETECTORS } from './token-detectors.js';
import type { Detector } from './types.js';

/** Default cap on held-back text; an open match longer than this is emitted masked. */
export const DEFAULT_MAX_HELD_CHARS = 64 * 1024;

export const DETECTORS: readonly Detector[] = [...TOKEN_DETECTORS, AUTHORIZATION, PRIVATE_KEY_BLOCK];

/** Everything the scanner needs, built once per secret set. */
export interface CompiledRedaction {
  /** How one-shot redaction reads its input (streams are always latin1 bytes). */
  readonly mode: TextMode;
  /** Every form of every secret value, as one automaton. */
  readonly secretMachine: SecretMachine;
  /** Detectors by the char code their keyword starts with (both cases when case-insensitive). */
  readonly detectorsByFirstChar: ReadonlyMap<number, readonly Detector[]>;
  /** Finds the keyword of any detector. */
  readonly trigger: RegExp;
  /** Longest keyword length - 1: how far back a keyword cut by the text end can start. */
  readonly keywordWindow: number;
  /** 1 for each char code that can end a proper prefix of a keyword. */
  readonly tailChars: Uint8Array;
  readonly maxHeldChars: number;
}

/**
 * `latin1-bytes`: text is a latin1 string holding raw bytes (one char per byte), as streams
 * are scanned. `text`: ordinary JS strings (log lines, error messages), redacted as their UTF-8.
 */
export type TextMode = 'latin1-bytes' | 'text';

export interface CompileOptions {
  readonly maxHeldChars?: number;
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');
}

/** `[...]` with runs of 3+ codes written as ranges. */
function classSource(table: Uint8Array): string {
  let members = '';
  for (let code = 0; code < table.length; code++) {
    if (table[code] !== 1) continue;
    let last = code;
    while (table[last + 1] === 1) last++;
    const first = escapeRegExp(String.fromCharCode(code));
    members += last - code >= 2 ? `${first}-${escapeRegExp(String.fromCharCode(last))}` : first;
    if (last - code === 1) members += escapeRegExp(String.fromCharCode(last));
    code = last;
  }
  return `[${members}]`;
}

/**
 * One case-insensitive regex for all keywords (measured faster than spelling out `[Bb]…`
 * classes; matchers re-check the case). Keywords sharing a word-boundary class sit behind one
 * negative lookbehind, so `task-1` never even becomes a candidate; matchers check the boundary
 * again for a keyword at the start of a chunk.
 */
function triggerOf(detectors: readonly Detector[]): RegExp {
  const groups = new Map<Uint8Array | null, string[]>();
  for (const detector of detectors) {
    groups.set(detector.notAfter, [...(groups.get(detector.notAfter) ?? []), escapeRegExp(detector.keyword)]);
  }
  const sources = [...groups].map(([notAfter, keywords]) => {
    const alternatives = `(?:${keywords.join('|')})`;
    return notAfter === null ? alternatives : `(?<!${classSource(notAfter)})${alternatives}`;
  });
  return new RegExp(sources.join('|'), 'gi');
}

function caseVariants(text: string, ignoreCase: boolean): string {
  return ignoreCase ? text.toLowerCase() + text.toUpperCase() : text;
}

function indexByFirstChar(detectors: readonly Detector[]): Map<number, Detector[]> {
  const byChar = new Map<number, Detector[]>();
  for (const detector of detectors) {
    for (const ch of new Set(caseVariants(detector.keyword.charAt(0), detector.ignoreCase))) {
      const code = ch.charCodeAt(0);
      byChar.set(code, [...(byChar.get(code) ?? []), detector]);
    }
  }
  return byChar;
}

function tailCharsOf(detectors: readonly Detector[]): Uint8Array {
  const table = new Uint8Array(65536);
  const mark = (text: string) => {
    for (let i = 0; i < text.length - 1; i++) table[text.charCodeAt(i)] = 1;
  };
  for (const detector of detectors) {
    if (detector.ignoreCase) {
      mark(detector.keyword.toLowerCase());
      mark(detector.keyword.toUpperCase());
    } else {
      mark(detector.keyword);
    }
  }
  return table;
}

/** The parts that depend on the detectors only (constants): built once per process, shared read-only. */
interface DetectorParts {
  readonly detectorsByFirstChar: ReadonlyMap<number, readonly Detector[]>;
  readonly trigger: RegExp;
  readonly keywordWindow: number;
  readonly tailChars: Uint8Array;
}
let detectorParts: DetectorParts | null = null;

function detectorPartsOnce(): DetectorParts {
  detectorParts ??= {
    detectorsByFirstChar: indexByFirstChar(DETECTORS),
    // Shared: every user sets `lastIndex` before its one synchronous `exec` (stream-redactor.ts).
    trigger: triggerOf(DETECTORS),
    keywordWindow: Math.max(...DETECTORS.map((d) => d.keyword.length)) - 1,
    tailChars: tailCharsOf(DETECTORS),
  };
  return detectorParts;
}

/**
 * Secret machines of the last few secret sets, most recent last. serve compiles a redactor for every exec's argv,
 * stdout and stderr and for every log line while secrets are live, almost always for the same set (a session's):
 * compiling it each time was the largest CPU cost of ours in a 100-session run (issue 39). In memory only, as the
 * machines themselves (which spell every form of every secret); the oldest set nobody holds leaves once 32 newer ones
 * were asked for. A set held (`holdRedaction`: a live session's) stays until released. A machine is read-only once
 * built, so sharing it is safe.
 */
const MACHINE_CACHE_SIZE = 32;
/**
 * And at most this many nodes of them, the newest set always kept: a set of 16 KB is some 800,000 nodes and 11 MB,
 * and 32 of those let go by sessions deleted one after another kept the server at 800 MB (issue 39, found by an
 * attacker creating and deleting sessions at the secrets' cap).
 */
const MACHINE_CACHE_NODES = 1_000_000;
interface CachedMachine {
  readonly machine: SecretMachine;
  holds: number;
}
const machines = new Map<string, CachedMachine>();
/** Compiles in steps under way, by set: a second holder of the same set waits for the first one's. */
const compiling = new Map<string, Promise<SecretMachine>>();
/**
 * Compiles in steps run one after another: each holds its builder's arrays (some 14 MB for a set of 16 KB) until it
 * ends, and many at once (a burst of sessions created together) would hold them all. Their steps interleave with
 * everything else on the loop, just not with each other's.
 */
let compileQueue: Promise<unknown> = Promise.resolve();

/** The exact sequence (length-prefixed, so no two sets share a key). */
function secretSetKey(secrets: readonly string[]): string {
  let key = '';
  for (const secret of secrets) key += `${secret.length}:${secret}`;
  return key;
}

/** The set's entry moved to the newest place, or a new one; the oldest unheld leave past the cache's size. */
function remember(key: string, found: CachedMachine | undefined, machine: SecretMachine): CachedMachine {
  const entry = found ?? { machine, holds: 0 };
  machines.delete(key);
  machines.set(key, entry);
  let unheld = 0;
  let nodes = 0;
  for (const cached of machines.values()) {
    if (cached.holds > 0) continue;
    unheld += 1;
    nodes += cached.machine.nodeCount;
  }
  for (const [oldKey, cached] of machines) {
    if (unheld <= MACHINE_CACHE_SIZE && nodes <= MACHINE_CACHE_NODES) break;
    if (cached.holds > 0 || oldKey === key) continue;
    machines.delete(oldKey);
    unheld -= 1;
    nodes -= cached.machine.nodeCount;
  }
  return entry;
}

function secretMachineOf(secrets: readonly string[]): SecretMachine {
  const key = secretSetKey(secrets);
  const known = machines.get(key);
  return remember(key, known, known?.machine ?? compileSecretMachine(secrets)).machine;
}

/**
 * Compiles `secrets` a step at a time, `pause()` awaited between steps (serve passes a turn of its event loop), and
 * holds the machine until the returned function is called: meanwhile every redaction of exactly this set finds it
 * compiled, and none compiles on the caller's loop (issue 39: a secret of 4 KB held serve's loop about 0.6 s). Holds
 * of one set add up; releasing twice releases once.
 */
export async function holdRedaction(
  secrets: readonly string[],
  pause: () => Promise<void>,
): Promise<() => void> {
  const key = secretSetKey(secrets);
  let entry = machines.get(key);
  if (entry === undefined) {
    let pending = compiling.get(key);
    if (pending === undefined) {
      pending = compileQueue
        .then(() => compileSecretMachineInSteps(secrets, pause))
        .finally(() => compiling.delete(key));
      compileQueue = pending.catch(() => undefined);
      compiling.set(key, pending);
    }
    const machine = await pending;
    entry = machines.get(key);
    entry = remember(key, entry, entry?.machine ?? machine);
  } else {
    entry = remember(key, entry, entry.machine);
  }
  const held = entry;
  held.holds += 1;
  let released = false;
  return () => {
    if (released) return;
    released = true;
    held.holds -= 1;
    if (held.holds === 0 && machines.get(key) === held) remember(key, held, held.machine);
  };
}

/** Whether `secrets`' machine is compiled now (held or still cached): a redaction of the set compiles nothing. */
export function redactionCompiled(secrets: readonly string[]): boolean {
  return machines.has(secretSetKey(secrets));
}

export function compileRedaction(
  secrets: readonly string[],
  mode: TextMode,
  options: CompileOptions = {},
): CompiledRedaction {
  return {
    mode,
    secretMachine: secretMachineOf(secrets),
    ...detectorPartsOnce(),
    maxHeldChars: options.maxHeldChars ?? DEFAULT_MAX_HELD_CHARS,
  };
}
