/**
 * The image plan per node on a swarm (issue 43, item 6): what each node's puller did on its own engine, from the
 * journal's `image` records that name a `node` (pulled, evicted, retried, failed there) and the `waited` records'
 * `nodes` (the nodes that held the image when the pair's wait ended). Strings are the journal's, unescaped: the page
 * escapes them. Pure.
 */
export interface ReportImageNode {
  readonly node: string;
  /** Images pulled on this node, each once, sorted. */
  readonly pulled: readonly string[];
  /** Images removed from this node to stay within its budget, each once, sorted. */
  readonly evicted: readonly string[];
  /** Images the node held at the end, by the journal: pulled there and not evicted since. Sorted. */
  readonly held: readonly string[];
  /** Their bytes in the node's store, as their last pull there measured them. */
  readonly held_bytes: number;
  /** Images whose last pull on this node failed for good. Sorted. */
  readonly failed: readonly string[];
  readonly pulls: number;
  readonly evictions: number;
  readonly retries: number;
  /** Pairs admitted to this node after waiting for their image (one wait may count on several nodes). */
  readonly waits: number;
  readonly waited_ms: number;
}

interface JournalRecord {
  readonly type: string;
  readonly [field: string]: unknown;
}

interface NodeTally {
  pulled: Set<string>;
  evicted: Set<string>;
  held: Map<string, number>;
  failed: Set<string>;
  pulls: number;
  evictions: number;
  retries: number;
  waits: number;
  waited: number;
}

const num = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
const sorted = (values: Iterable<string>): string[] =>
  [...values].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));

/** The nodes a record speaks of: its `node`, or a `waited` record's `nodes`. */
function nodesOf(e: JournalRecord): string[] {
  if (typeof e['node'] === 'string') return [e['node']];
  const nodes = e['nodes'];
  return Array.isArray(nodes) ? nodes.filter((n): n is string => typeof n === 'string') : [];
}

/**
 * One row per node: `image_plan.nodes` in their order, then any other node the journal names (sorted). Null when
 * neither names a node (the local executor: its report keeps no per-node part).
 */
export function reportImageNodes(
  planNodes: readonly string[] | undefined,
  journal: readonly JournalRecord[],
): ReportImageNode[] | null {
  const records = journal.filter((e) => e.type === 'image' && typeof e['image'] === 'string');
  const extra = sorted(new Set(records.flatMap(nodesOf).filter((n) => !(planNodes ?? []).includes(n))));
  const names = [...new Set([...(planNodes ?? []), ...extra])];
  if (names.length === 0) return null;
  const tallies = new Map<string, NodeTally>(
    names.map((n) => [
      n,
      {
        pulled: new Set(),
        evicted: new Set(),
        held: new Map(),
        failed: new Set(),
        pulls: 0,
        evictions: 0,
        retries: 0,
        waits: 0,
        waited: 0,
      },
    ]),
  );
  for (const e of records)
    for (const node of new Set(nodesOf(e))) {
      const t = tallies.get(node);
      if (t !== undefined) tally(t, e, e['image'] as string);
    }
  return names.map((node): ReportImageNode => {
    const t = tallies.get(node)!;
    return {
      node,
      pulled: sorted(t.pulled),
      evicted: sorted(t.evicted),
      held: sorted(t.held.keys()),
      held_bytes: [...t.held.values()].reduce((a, b) => a + b, 0),
      failed: sorted(t.failed),
      pulls: t.pulls,
      evictions: t.evictions,
      retries: t.retries,
      waits: t.waits,
      waited_ms: t.waited,
    };
  });
}

function tally(t: NodeTally, e: JournalRecord, image: string): void {
  switch (e['action']) {
    case 'pulled':
      t.pulls += 1;
      t.pulled.add(image);
      t.held.set(image, num(e['bytes']));
      t.failed.delete(image);
      break;
    case 'evicted':
      t.evictions += 1;
      t.evicted.add(image);
      t.held.delete(image);
      break;
    case 'pull_retry':
      t.retries += 1;
      break;
    case 'pull_failed':
      t.failed.add(image);
      break;
    case 'waited':
      t.waits += 1;
      t.waited += num(e['waited_ms']);
      break;
    default:
      break;
  }
}

/** Per image: the nodes it was pulled on (sorted), from the rows above. */
export function pulledOn(nodes: readonly ReportImageNode[], image: string): string[] {
  return sorted(nodes.filter((n) => n.pulled.includes(image)).map((n) => n.node));
}
