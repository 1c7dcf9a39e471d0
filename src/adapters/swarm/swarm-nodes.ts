import type Docker from 'dockerode';
import type { NodeInventory } from '../../app/ports/executor-inventory.js';
import { toEngineError } from '../docker/engine-error.js';
import { EngineError } from '../../app/ports/engine-error.js';
import { gpusOf, nodeMatches, nodeTakesWork, type RawNode } from './node-constraints.js';
import { callOptions, connectEngine, promised } from './swarm-connection.js';

/** How long a node's engine has to answer a ping before the node counts as silent. */
const NODE_PING_TIMEOUT_MS = 2_000;

/** null: the node answers; `down`: the manager says so; `silent`: its engine does not answer. */
export type NodeLoss = 'down' | 'silent' | null;

/**
 * The swarm's nodes: which take work (the manager's list), their hostnames, their own engines (`--node-engine`, by
 * hostname or swarm id), whether one is lost, and which the operator declared down.
 */
export class SwarmNodes implements NodeInventory {
  readonly #manager: Docker;
  readonly #urls: Readonly<Record<string, string>>;
  readonly #down: ReadonlySet<string>;
  readonly #engines = new Map<string, Promise<Docker>>();
  readonly #hostnames = new Map<string, string>();

  constructor(manager: Docker, nodeEngines: Readonly<Record<string, string>>, downNodes: readonly string[]) {
    this.#manager = manager;
    this.#urls = nodeEngines;
    this.#down = new Set(downNodes);
  }

  async readyNodes(constraints: readonly string[] = []): Promise<readonly string[]> {
    return (await this.#readyRawNodes())
      .filter((n) => nodeMatches(n, constraints))
      .map((n) => n.Description?.Hostname ?? n.ID);
  }

  /** The swarm's nodes that take work now (ready, active), with their GPUs (generic resources `NVIDIA-GPU`). */
  async list(): Promise<{ readonly id: string; readonly hostname: string; readonly gpus: number }[]> {
    return (await this.#readyRawNodes()).map((n) => ({
      id: n.ID,
      hostname: n.Description?.Hostname ?? n.ID,
      gpus: gpusOf(n),
    }));
  }

  async #readyRawNodes(): Promise<RawNode[]> {
    let raw: RawNode[];
    try {
      raw = (await promised(this.#manager.listNodes.bind(this.#manager))(callOptions())) as RawNode[];
    } catch (err) {
      throw toEngineError(err, 'list swarm nodes');
    }
    return raw.filter(nodeTakesWork);
  }

  /** The nodes given an engine (`--node-engine NODE=URL`), by the name they were given. */
  configured(): readonly string[] {
    return Object.keys(this.#urls);
  }

  /** Declared down by the operator (`e1-batch node-down`): its containers count as gone without its engine's 404. */
  isDeclaredDown(node: string): boolean {
    return this.#down.has(node);
  }

  /** The same for a node known by its swarm id (declared by id or by hostname). */
  async isDeclaredDownById(nodeId: string): Promise<boolean> {
    return this.#down.has(nodeId) || this.#down.has(await this.nodeName(nodeId));
  }

  /** The engine of a configured node (connected once; a failed connection is tried again on the next call). */
  engineNamed(node: string): Promise<Docker> {
    let engine = this.#engines.get(node);
    if (engine === undefined) {
      const url = this.#urls[node];
      if (url === undefined) return Promise.reject(noEngineFor(node, node));
      engine = connectEngine(url);
      this.#engines.set(node, engine);
      // Not swallowed: the caller awaits `engine` and gets the failure; this only forgets it so a later call retries.
      engine.catch(() => this.#engines.delete(node));
    }
    return engine;
  }

  /** The engine of the node with this swarm id (configured by id or by hostname). */
  async engineOf(nodeId: string): Promise<{ name: string; engine: Docker }> {
    if (Object.hasOwn(this.#urls, nodeId)) return { name: nodeId, engine: await this.engineNamed(nodeId) };
    const hostname = await this.nodeName(nodeId);
    if (!Object.hasOwn(this.#urls, hostname)) throw noEngineFor(hostname, nodeId);
    return { name: hostname, engine: await this.engineNamed(hostname) };
  }

  /** The hostname of a swarm node (cached; the id when the manager cannot say). */
  async nodeName(nodeId: string): Promise<string> {
    const known = this.#hostnames.get(nodeId);
    if (known !== undefined) return known;
    try {
      const node = (await this.#manager.getNode(nodeId).inspect()) as { Description?: { Hostname?: string } };
      const name = node.Description?.Hostname ?? nodeId;
      this.#hostnames.set(nodeId, name);
      return name;
    } catch {
      // A name for messages and for matching declared-down nodes: the id stands in (not cached: asked again later).
      return nodeId;
    }
  }

  /** Whether the node that runs a pair is lost: the manager marks it down, or its engine does not answer a ping. */
  async loss(nodeId: string): Promise<NodeLoss> {
    try {
      const node = (await this.#manager.getNode(nodeId).inspect(callOptions())) as {
        Status?: { State?: string };
      };
      if (node.Status?.State === 'down') return 'down';
    } catch {
      // the manager's view is a hint; the node's own engine decides below
    }
    try {
      const { engine } = await this.engineOf(nodeId);
      await promised(engine.ping.bind(engine))({ abortSignal: AbortSignal.timeout(NODE_PING_TIMEOUT_MS) });
      return null;
    } catch {
      // No engine configured, unreachable or too slow: that is the answer (the caller applies its grace period).
      return 'silent';
    }
  }
}

function noEngineFor(hostname: string, nodeId: string): EngineError {
  return new EngineError('engine_error', `no --node-engine for swarm node ${hostname} (${nodeId})`, {
    statusCode: null,
    engineMessage: `no engine configured for node ${hostname}`,
    suggestions: [`add --node-engine ${hostname}=unix:///…|tcp://…|ssh://…`],
  });
}
