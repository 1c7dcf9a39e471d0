/**
 * Issue 43, swarm: `--node-engine NODE=URL` takes a node's hostname or its swarm id, but everything after `start`
 * (admission, the per-node image pullers, node-down, resume) names a node by its hostname. `start` therefore records
 * the executor with hostnames only: this is the one place a NODE given by id becomes its hostname.
 */
import type { ExecutorConfig } from '../../core/executor.js';
import { InvalidInputError, type Issue } from '../../core/errors.js';

/** A swarm node that takes work, as the manager lists it. */
export interface SwarmNodeFacts {
  /** Its hostname: the name batch.json, admission and the pullers use. */
  readonly node: string;
  /** Its swarm node id. */
  readonly id: string;
  readonly gpus: number;
}

/**
 * The executor with each `node_engines` key made the hostname of the ready node it names (by hostname or id), and
 * `hostnameOf` for names given by the runtime as configured. Refused (exit 2, nothing written yet): a key no ready
 * node has, or two keys of one node.
 */
export function withNodeHostnames(
  executor: ExecutorConfig & { kind: 'swarm' },
  nodes: readonly SwarmNodeFacts[],
): { readonly executor: ExecutorConfig & { kind: 'swarm' }; readonly hostnameOf: (name: string) => string } {
  const byName = new Map<string, SwarmNodeFacts>();
  for (const n of nodes) byName.set(n.id, n);
  // A hostname wins over an id that happens to spell it.
  for (const n of nodes) byName.set(n.node, n);
  const listed = nodes.map((n) => `${n.node} (${n.id})`).join(', ') || 'none';
  const issues: Issue[] = [];
  const engines: Record<string, string> = {};
  const givenAt = new Map<string, number>();
  const renamed = new Map<string, string>();
  for (const [i, [name, url]] of Object.entries(executor.node_engines).entries()) {
    const at = `--node-engine[${i}]`;
    const node = byName.get(name);
    if (node === undefined) {
      issues.push({
        path: at,
        rule: `NODE "${name}" must be the hostname or id of a ready swarm node: ${listed}`,
      });
      continue;
    }
    const first = givenAt.get(node.node);
    if (first !== undefined) {
      issues.push({
        path: at,
        rule: `NODE "${name}" is swarm node ${node.node} (${node.id}), already given by --node-engine[${first}]: one engine per node`,
      });
      continue;
    }
    givenAt.set(node.node, i);
    engines[node.node] = url;
    renamed.set(name, node.node);
  }
  if (issues.length > 0)
    throw new InvalidInputError('E_USAGE', 'invalid --node-engine for this swarm', issues);
  return {
    executor: { ...executor, node_engines: engines },
    hostnameOf: (name) => renamed.get(name) ?? name,
  };
}
