/** The swarm's generic resource kind for GPUs (`--node-generic-resource NVIDIA-GPU=…` on each node's engine). */
export const SWARM_GPU_RESOURCE = 'NVIDIA-GPU';

/** A node as the manager's node list reports it (the fields placement and inventory read). */
export interface RawNode {
  ID: string;
  Spec?: { Availability?: string; Role?: string; Labels?: Record<string, string> };
  Status?: { State?: string };
  Description?: {
    Hostname?: string;
    Platform?: { OS?: string; Architecture?: string };
    Engine?: { Labels?: Record<string, string> };
    Resources?: {
      GenericResources?: {
        NamedResourceSpec?: { Kind?: string };
        DiscreteResourceSpec?: { Kind?: string; Value?: number };
      }[];
    };
  };
}

function attributeOf(node: RawNode, attribute: string): string | undefined {
  if (attribute === 'node.id') return node.ID;
  if (attribute === 'node.hostname') return node.Description?.Hostname;
  if (attribute === 'node.role') return node.Spec?.Role;
  if (attribute === 'node.platform.os') return node.Description?.Platform?.OS;
  if (attribute === 'node.platform.arch') return node.Description?.Platform?.Architecture;
  if (attribute.startsWith('node.labels.'))
    return node.Spec?.Labels?.[attribute.slice('node.labels.'.length)];
  if (attribute.startsWith('engine.labels.'))
    return node.Description?.Engine?.Labels?.[attribute.slice('engine.labels.'.length)];
  return undefined;
}

/**
 * Whether a node satisfies placement constraints in the manifest's syntax (`ATTRIBUTE==VALUE`, `ATTRIBUTE!=VALUE`),
 * as Swarm matches them: values compared without regard to case, a missing attribute equal to nothing. A constraint
 * we cannot read is left to Swarm (it matches here).
 */
export function nodeMatches(node: RawNode, constraints: readonly string[]): boolean {
  return constraints.every((constraint) => {
    const m = /^([A-Za-z0-9._-]+) ?(==|!=) ?(.+)$/.exec(constraint);
    if (m === null) return true;
    const actual = attributeOf(node, m[1]!);
    const equal = actual !== undefined && actual.toLowerCase() === m[3]!.toLowerCase();
    return m[2] === '==' ? equal : !equal;
  });
}

/** A node takes work now: ready, and its availability active (not paused or drained). */
export function nodeTakesWork(node: RawNode): boolean {
  return node.Status?.State === 'ready' && (node.Spec?.Availability ?? 'active') === 'active';
}

/** The node's GPUs: its `NVIDIA-GPU` generic resources (named ones count one each, discrete ones their value). */
export function gpusOf(node: RawNode): number {
  let count = 0;
  for (const r of node.Description?.Resources?.GenericResources ?? []) {
    if (r.NamedResourceSpec?.Kind === SWARM_GPU_RESOURCE) count += 1;
    if (r.DiscreteResourceSpec?.Kind === SWARM_GPU_RESOURCE) count += r.DiscreteResourceSpec.Value ?? 0;
  }
  return count;
}
