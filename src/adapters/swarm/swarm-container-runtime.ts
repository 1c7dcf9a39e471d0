import { readFileSync } from 'node:fs';
import { PassThrough, Readable, Writable } from 'node:stream';
import Docker from 'dockerode';
import type {
  ContainerHandle,
  ContainerOutput,
  ContainerRuntime,
  ContainerSpec,
  ContainerState,
  EngineInfo,
  RemoveResult,
  WaitResult,
} from '../../app/ports/container-runtime.js';
import { parseEngineEndpoint, type EngineEndpoint } from '../../core/executor.js';
import { demultiplex } from '../docker/demux.js';
import { EngineError, statusOf, toEngineError } from '../docker/engine-error.js';
import { PAIR_LOG_CONFIG } from '../docker/docker-container-runtime.js';
import { extractArchiveSafely } from '../safe-extract.js';
import { sleep } from '../../core/sleep.js';

/**
 * The pair lifecycle's ContainerRuntime on Docker Swarm (issue 13, docs/scale-out.md). One replicated service per
 * pair (replicas 1, restart condition none, init, our labels on service and container); the handle's id is the
 * service id. The manager's API places the pair, reports its task (exit code, node) and streams its logs; each
 * node's own engine (`--node-engine`) is used only for what the manager cannot do: read the pair's volumes back
 * (outcome, Codex sessions) and confirm that the task's container is gone (404) after the service is removed.
 */

/** Task states after which the task's container no longer runs. */
const TERMINAL = new Set(['complete', 'failed', 'shutdown', 'rejected', 'orphaned', 'remove']);
const RUNNING = new Set(['running']);
const MOUNTS_LABEL = 'roboguide.mounts';
export const SWARM_GPU_RESOURCE = 'NVIDIA-GPU';
const DEFAULT_POLL_MS = 250;
/** A node whose engine does not answer for this long while its pair runs (and the manager agrees it is not ready, or never answers either) is lost. */
const DEFAULT_NODE_LOSS_GRACE_MS = 5_000;
/**
 * While a pair's node answers, its health (the manager's view and a ping of its engine) is checked this often, not
 * on every poll of the task: two calls fewer per poll and pair. A node that stopped answering is checked on every
 * poll, so the loss is still declared once the grace has passed (at most this much later for a node the manager
 * marks down).
 */
const NODE_CHECK_MS = 1_000;
/** The best-effort removal of a task's container on its node, after its service is gone (a node lost must not stall it). */
const CONTAINER_REMOVE_TIMEOUT_MS = 5_000;
const LOG_COMPLETION_TIMEOUT_MS = 20_000;
const CALL_TIMEOUT_MS = 60_000;
const COLLECT_TIMEOUT_MS = 120_000;
const COLLECT_LIMITS = { maxFiles: 1_000, maxTotalBytes: 256 * 1024 * 1024, maxFileBytes: 256 * 1024 * 1024 };

/** dockerode's promise form of a method whose typings (lagging dockerode 5) only offer the callback overload for our options. */
function promised(method: unknown): (options: object) => Promise<unknown> {
  return method as (options: object) => Promise<unknown>;
}

/** A log read without `follow` answers the whole (multiplexed) log as one Buffer, not a stream. */
function asStream(log: unknown): Readable {
  return Buffer.isBuffer(log) ? Readable.from([log]) : (log as Readable);
}

/** dockerode options for an endpoint (TLS files are read here: a missing one is a clear error). */
export function dockerOptionsFor(endpoint: EngineEndpoint): Docker.DockerOptions {
  switch (endpoint.kind) {
    case 'unix':
      return { socketPath: endpoint.socketPath };
    case 'tcp':
      return endpoint.tls === null
        ? { host: endpoint.host, port: endpoint.port, protocol: 'http' }
        : {
            host: endpoint.host,
            port: endpoint.port,
            protocol: 'https',
            ca: readFileSync(endpoint.tls.ca),
            cert: readFileSync(endpoint.tls.cert),
            key: readFileSync(endpoint.tls.key),
          };
    case 'ssh':
      return {
        protocol: 'ssh',
        host: endpoint.host,
        port: endpoint.port,
        ...(endpoint.username !== null ? { username: endpoint.username } : {}),
      };
  }
}

function dockerFor(url: string): Docker {
  const endpoint = parseEngineEndpoint(url);
  if ('problem' in endpoint)
    throw new EngineError('engine_error', `engine endpoint ${url}: ${endpoint.problem}`, {
      statusCode: null,
      engineMessage: endpoint.problem,
    });
  return new Docker(dockerOptionsFor(endpoint));
}

/** A volume that stands for one of the spec's binds on the node (no shared file system is assumed). */
interface MountRecord {
  readonly volume: string;
  readonly target: string;
  readonly hostPath: string;
  /** Copied back into `hostPath` after the pair (the outcome folder). */
  readonly collect: boolean;
}

interface TaskView {
  readonly id: string;
  readonly nodeId: string | null;
  readonly state: string;
  readonly containerId: string | null;
  readonly exitCode: number | null;
  readonly err: string | null;
  readonly timestamp: string | null;
}

/** Where a pair's task ran: kept so removal can be verified on that node after the service (and its tasks) are gone. */
interface Placement {
  nodeId: string;
  containerId: string | null;
  mounts: readonly MountRecord[];
}

/**
 * The service log API with `follow` never ends (not even when the service is removed). A feed forwards the followed
 * bytes and counts them per stream; once the task is terminal, `complete` reads the whole log once more (that read
 * ends) and forwards only the bytes past those counts, then ends both streams: each byte once, nothing lost.
 */
export class LogFeed {
  readonly stdout = new PassThrough();
  readonly stderr = new PassThrough();
  #counts = { stdout: 0, stderr: 0 };
  #completing = false;
  #completed: Promise<void> | null = null;
  #source: Readable | null = null;

  attachSource(source: Readable): void {
    this.#source = source;
    const forward = (name: 'stdout' | 'stderr'): Writable =>
      new Writable({
        write: (chunk: Buffer, _enc, done) => {
          if (this.#completing) return done();
          this.#counts[name] += chunk.length;
          const target = this[name];
          if (target.destroyed || target.write(chunk)) done();
          else target.once('drain', () => done());
        },
      });
    // A follow that fails (manager connection reset) loses nothing: completion re-reads the whole log.
    demultiplex(source, forward('stdout'), forward('stderr')).catch(() => undefined);
  }

  /** No more bytes will come (the node is gone): end both streams with what was delivered. */
  endNow(): void {
    this.#completing = true;
    this.#source?.destroy();
    this.#completed ??= Promise.resolve();
    this.stdout.end();
    this.stderr.end();
  }

  complete(readAll: () => Promise<Readable>, timeoutMs: number): Promise<void> {
    return (this.#completed ??= (async () => {
      this.#completing = true;
      this.#source?.destroy();
      const skip = { ...this.#counts };
      const rest = (name: 'stdout' | 'stderr'): Writable =>
        new Writable({
          write: (chunk: Buffer, _enc, done) => {
            let part = chunk;
            if (skip[name] >= part.length) {
              skip[name] -= part.length;
              return done();
            }
            part = part.subarray(skip[name]);
            skip[name] = 0;
            const target = this[name];
            if (target.destroyed || target.write(part)) done();
            else target.once('drain', () => done());
          },
        });
      try {
        const all = await readAll();
        const timer = setTimeout(() => all.destroy(new Error('log completion timed out')), timeoutMs);
        try {
          await demultiplex(all, rest('stdout'), rest('stderr'));
        } finally {
          clearTimeout(timer);
        }
        this.stdout.end();
        this.stderr.end();
      } catch (err) {
        // The log could not be read to its end (the node is gone): the streams end in error, never as complete.
        this.stdout.destroy(err as Error);
        this.stderr.destroy(err as Error);
      }
    })());
  }
}

export interface SwarmRuntimeOptions {
  readonly manager: string;
  readonly nodeEngines: Readonly<Record<string, string>>;
  readonly pollMs?: number;
  readonly nodeLossGraceMs?: number;
  /**
   * Nodes the operator declared down (`e1-batch node-down`, recorded in the batch): a container there counts as gone
   * without its engine's 404. Every other node must answer for a removal to be verified.
   */
  readonly downNodes?: readonly string[];
}

export class SwarmContainerRuntime implements ContainerRuntime {
  readonly manager: Docker;
  readonly #nodeUrls: Readonly<Record<string, string>>;
  readonly #nodeEngines = new Map<string, Docker>();
  readonly #hostnames = new Map<string, string>();
  readonly #placements = new Map<string, Placement>();
  readonly #feeds = new Map<string, LogFeed>();
  readonly #pollMs: number;
  readonly #nodeLossGraceMs: number;
  readonly #downNodes: ReadonlySet<string>;

  constructor(options: SwarmRuntimeOptions) {
    this.#downNodes = new Set(options.downNodes ?? []);
    this.manager = dockerFor(options.manager);
    this.#nodeUrls = options.nodeEngines;
    this.#pollMs = options.pollMs ?? DEFAULT_POLL_MS;
    this.#nodeLossGraceMs = options.nodeLossGraceMs ?? DEFAULT_NODE_LOSS_GRACE_MS;
  }

  #call(): { abortSignal: AbortSignal } {
    return { abortSignal: AbortSignal.timeout(CALL_TIMEOUT_MS) };
  }

  async info(): Promise<EngineInfo> {
    try {
      const [info, version] = await Promise.all([
        this.manager.info() as Promise<{
          ID?: string;
          Runtimes?: Record<string, unknown>;
          LoggingDriver?: string;
          Swarm?: { LocalNodeState?: string; ControlAvailable?: boolean; Cluster?: { ID?: string } };
        }>,
        this.manager.version(),
      ]);
      if (info.Swarm?.LocalNodeState !== 'active' || info.Swarm.ControlAvailable !== true) {
        throw new EngineError(
          'engine_error',
          'the --manager engine is not a swarm manager (docker info: Swarm not active or not a manager)',
          {
            statusCode: null,
            engineMessage: `swarm state ${info.Swarm?.LocalNodeState ?? 'unknown'}`,
            suggestions: ['give --manager the engine of a swarm manager node (`docker node ls` works there)'],
          },
        );
      }
      return {
        id: info.Swarm.Cluster?.ID ?? info.ID ?? '',
        version: version.Version,
        apiVersion: version.ApiVersion,
        runtimes: info.Runtimes ? Object.keys(info.Runtimes) : [],
        loggingDriver: info.LoggingDriver,
      };
    } catch (err) {
      throw toEngineError(err, 'query the swarm manager');
    }
  }

  async readyNodes(constraints: readonly string[] = []): Promise<readonly string[]> {
    return (await this.#readyRawNodes())
      .filter((n) => nodeMatches(n, constraints))
      .map((n) => n.Description?.Hostname ?? n.ID);
  }

  async #readyRawNodes(): Promise<RawNode[]> {
    let raw: RawNode[];
    try {
      raw = (await promised(this.manager.listNodes.bind(this.manager))(this.#call())) as RawNode[];
    } catch (err) {
      throw toEngineError(err, 'list swarm nodes');
    }
    return raw.filter((n) => n.Status?.State === 'ready' && (n.Spec?.Availability ?? 'active') === 'active');
  }

  /** The swarm's nodes that take work now (ready, active), with their GPUs (generic resources `NVIDIA-GPU`). */
  async nodes(): Promise<{ readonly id: string; readonly hostname: string; readonly gpus: number }[]> {
    return (await this.#readyRawNodes()).map((n) => ({
      id: n.ID,
      hostname: n.Description?.Hostname ?? n.ID,
      gpus: gpusOf(n),
    }));
  }

  /** Present on every configured node's engine (a node without it would fail the pair placed there). */
  async imageExists(image: string): Promise<boolean> {
    for (const [node, url] of Object.entries(this.#nodeUrls)) {
      const engine = this.#engineForUrl(node, url);
      try {
        await engine.getImage(image).inspect();
      } catch (err) {
        if (statusOf(err) === 404) return false;
        throw toEngineError(err, `inspect an image on node ${node}`, image);
      }
    }
    return true;
  }

  #engineForUrl(node: string, url: string): Docker {
    let engine = this.#nodeEngines.get(node);
    if (engine === undefined) {
      engine = dockerFor(url);
      this.#nodeEngines.set(node, engine);
    }
    return engine;
  }

  /** The engine of the node with this swarm id (configured by id or by hostname). */
  async #nodeEngine(nodeId: string): Promise<{ name: string; engine: Docker }> {
    if (Object.hasOwn(this.#nodeUrls, nodeId))
      return { name: nodeId, engine: this.#engineForUrl(nodeId, this.#nodeUrls[nodeId]!) };
    const hostname = await this.nodeName(nodeId);
    const url = this.#nodeUrls[hostname];
    if (url === undefined) {
      throw new EngineError('engine_error', `no --node-engine for swarm node ${hostname} (${nodeId})`, {
        statusCode: null,
        engineMessage: `no engine configured for node ${hostname}`,
        suggestions: [`add --node-engine ${hostname}=unix:///…|tcp://…|ssh://…`],
      });
    }
    return { name: hostname, engine: this.#engineForUrl(hostname, url) };
  }

  /** The hostname of a swarm node (cached; the id when the manager cannot say). */
  async nodeName(nodeId: string): Promise<string> {
    const known = this.#hostnames.get(nodeId);
    if (known !== undefined) return known;
    try {
      const node = (await this.manager.getNode(nodeId).inspect()) as { Description?: { Hostname?: string } };
      const name = node.Description?.Hostname ?? nodeId;
      this.#hostnames.set(nodeId, name);
      return name;
    } catch {
      return nodeId;
    }
  }

  async create(spec: ContainerSpec): Promise<ContainerHandle> {
    // A swarm service cannot choose its OCI runtime: never run a pair that asked for gVisor under runc (fail closed).
    if (spec.runtime !== undefined && spec.runtime !== 'runc') {
      const message = `runtime "${spec.runtime}" cannot be chosen for a swarm service (only "runc")`;
      throw new EngineError('engine_error', message, { statusCode: null, engineMessage: message });
    }
    const mounts: MountRecord[] = spec.binds.map((b, i) => ({
      volume: `${spec.name}-m${i}`,
      target: b.containerPath,
      hostPath: b.hostPath,
      collect: b.collect === true,
    }));
    const gpus = gpuCountOf(spec);
    const serviceSpec = {
      Name: spec.name,
      Labels: { ...spec.labels, [MOUNTS_LABEL]: JSON.stringify(mounts) },
      TaskTemplate: {
        ContainerSpec: {
          Image: spec.image,
          Args: [...spec.cmd],
          Dir: spec.workingDir,
          Env: Object.entries(spec.env).map(([k, v]) => `${k}=${v}`),
          Labels: { ...spec.labels },
          Init: true,
          StopGracePeriod: spec.stopTimeoutSec * 1e9,
          Mounts: mounts.map((m) => ({
            Type: 'volume',
            Source: m.volume,
            Target: m.target,
            ReadOnly: false,
            VolumeOptions: { Labels: { ...spec.labels } },
          })),
        },
        RestartPolicy: { Condition: 'none', MaxAttempts: 0 },
        Resources:
          gpus > 0
            ? {
                Reservations: {
                  GenericResources: [{ DiscreteResourceSpec: { Kind: SWARM_GPU_RESOURCE, Value: gpus } }],
                },
              }
            : {},
        Placement: { Constraints: [...(spec.placement ?? [])] },
        LogDriver: { Name: PAIR_LOG_CONFIG.type, Options: { ...PAIR_LOG_CONFIG.config } },
      },
      Mode: { Replicated: { Replicas: 1 } },
      EndpointSpec: {
        Ports: spec.ports.map((p) => ({
          Protocol: 'tcp',
          TargetPort: p,
          PublishedPort: p,
          PublishMode: 'host',
        })),
      },
    };
    try {
      const service = (await this.manager.createService(
        serviceSpec as unknown as Docker.CreateServiceOptions,
      )) as unknown as { id: string };
      this.#placements.set(service.id, { nodeId: '', containerId: null, mounts });
      return { id: service.id, name: spec.name };
    } catch (err) {
      throw toEngineError(err, 'create a swarm service', spec.image);
    }
  }

  /** The service's log, from its first byte; a new feed each time (a reattach starts over and skips what is on disk). */
  async #openFeed(id: string): Promise<ContainerOutput> {
    const feed = new LogFeed();
    this.#feeds.set(id, feed);
    try {
      const service = this.manager.getService(id);
      const source = (await promised(service.logs.bind(service))({
        follow: true,
        stdout: true,
        stderr: true,
        ...this.#call(),
      })) as Readable;
      feed.attachSource(source);
    } catch (err) {
      this.#feeds.delete(id);
      throw toEngineError(err, 'follow service logs');
    }
    return { stdout: feed.stdout, stderr: feed.stderr };
  }

  attach(id: string): Promise<ContainerOutput> {
    return this.#openFeed(id);
  }

  /**
   * A follow of a task that already ended (the lifecycle reads a reattached pair's log once more after it stopped) is
   * completed at once: nothing else would end it, since the service log's follow never ends on its own.
   */
  async follow(id: string): Promise<ContainerOutput> {
    const output = await this.#openFeed(id);
    const task = await this.#task(id).catch(() => undefined);
    if (task !== undefined && task !== null && TERMINAL.has(task.state))
      void this.#completeLogs(id).catch(() => undefined);
    return output;
  }

  /** The service starts its task when it is created (replicas 1); nothing is left to start. */
  async start(_id: string): Promise<void> {}

  /** Ends the log feed of a task that no longer runs (bounded). */
  async #completeLogs(id: string): Promise<void> {
    const feed = this.#feeds.get(id);
    if (feed === undefined) return;
    await feed.complete(async () => {
      // The task's container on its node first: once that engine calls the container exited its log is whole (the
      // engine waits for the output copiers), whereas the manager's service log is relayed by the node's agent and
      // can still lack the last (partial) line right after the task ends. The service log when the node cannot say.
      const placement = this.#placements.get(id);
      if (placement !== undefined && placement.nodeId !== '' && placement.containerId !== null) {
        try {
          const { engine } = await this.#nodeEngine(placement.nodeId);
          const container = engine.getContainer(placement.containerId);
          const state = (await container.inspect(this.#call())) as { State?: { Running?: boolean } };
          if (state.State?.Running === false) {
            return asStream(
              await promised(container.logs.bind(container))({
                follow: false,
                stdout: true,
                stderr: true,
                ...this.#call(),
              }),
            );
          }
        } catch {
          // the service log below
        }
      }
      const service = this.manager.getService(id);
      return asStream(
        await promised(service.logs.bind(service))({
          follow: false,
          stdout: true,
          stderr: true,
          ...this.#call(),
        }),
      );
    }, LOG_COMPLETION_TIMEOUT_MS);
  }

  /** The service's newest task, or null (none yet); undefined when the service does not exist. */
  async #task(id: string): Promise<TaskView | null | undefined> {
    let tasks: unknown[];
    try {
      await this.manager.getService(id).inspect(this.#call());
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw toEngineError(err, 'inspect a swarm service');
    }
    try {
      tasks = await this.manager.listTasks({ filters: JSON.stringify({ service: [id] }), ...this.#call() });
    } catch (err) {
      throw toEngineError(err, 'list swarm tasks');
    }
    const newest = (tasks as RawTask[])
      .sort((a, b) => (a.Version?.Index ?? 0) - (b.Version?.Index ?? 0))
      .at(-1);
    if (newest === undefined) return null;
    const view: TaskView = {
      id: newest.ID,
      nodeId: newest.NodeID ?? null,
      state: newest.Status?.State ?? 'new',
      containerId: newest.Status?.ContainerStatus?.ContainerID ?? null,
      exitCode: newest.Status?.ContainerStatus?.ExitCode ?? null,
      err: newest.Status?.Err ?? null,
      timestamp: newest.Status?.Timestamp ?? null,
    };
    const placement = this.#placements.get(id) ?? { nodeId: '', containerId: null, mounts: [] };
    if (view.nodeId !== null && view.nodeId !== '') placement.nodeId = view.nodeId;
    if (view.containerId !== null && view.containerId !== '') placement.containerId = view.containerId;
    this.#placements.set(id, placement);
    return view;
  }

  /** Where the pair's task ran, or null when the task was never placed (for status and the node-loss policy). */
  async placementOf(
    id: string,
  ): Promise<{ readonly nodeId: string; readonly node: string; readonly containerId: string | null } | null> {
    await this.#task(id).catch(() => undefined);
    const placement = this.#placements.get(id);
    if (placement === undefined || placement.nodeId === '') return null;
    return {
      nodeId: placement.nodeId,
      node: await this.nodeName(placement.nodeId),
      containerId: placement.containerId,
    };
  }

  async wait(id: string, options: { deadlineMs: number; signal?: AbortSignal }): Promise<WaitResult> {
    let lastSeenAliveMs = Date.now();
    let nodeSilentSince: number | null = null;
    let nodeCheckedAtMs = 0;
    for (;;) {
      if (options.signal?.aborted === true) return { kind: 'aborted' };
      if (Date.now() >= options.deadlineMs) return { kind: 'deadline' };
      let task: TaskView | null | undefined;
      try {
        task = await this.#task(id);
      } catch (err) {
        if (err instanceof EngineError && err.fault === 'engine_unavailable')
          return { kind: 'engine_lost', lastSeenAliveMs };
        throw err;
      }
      if (task === undefined) return { kind: 'engine_lost', lastSeenAliveMs };
      if (task !== null && TERMINAL.has(task.state)) {
        // A task the swarm ended because its node went away (orphaned, or failed with the node down) did not exit.
        if (
          task.nodeId !== null &&
          task.nodeId !== '' &&
          (task.state === 'orphaned' || (await this.#nodeLost(task.nodeId)) !== null)
        ) {
          return this.#nodeLostResult(id, task.nodeId, task.state === 'orphaned' ? 'down' : 'silent');
        }
        if (task.state === 'rejected' || (task.containerId === null && task.exitCode === null)) {
          // The node could not start the task (image missing there, a bad mount, …): an engine fault, not an exit.
          const text = task.err ?? `task ${task.state}`;
          throw new EngineError(
            /no such image/i.test(text) ? 'image_missing' : 'engine_error',
            `the swarm could not run the pair's task: ${text}`,
            {
              statusCode: null,
              engineMessage: text,
            },
          );
        }
        await this.#completeLogs(id);
        return { kind: 'exited', exitCode: task.exitCode ?? -1 };
      }
      lastSeenAliveMs = Date.now();
      const nodeCheckDue = nodeSilentSince !== null || Date.now() - nodeCheckedAtMs >= NODE_CHECK_MS;
      if (
        nodeCheckDue &&
        task !== null &&
        task.nodeId !== null &&
        task.nodeId !== '' &&
        (RUNNING.has(task.state) || task.state === 'starting')
      ) {
        nodeCheckedAtMs = Date.now();
        const lost = await this.#nodeLost(task.nodeId);
        if (lost === null) nodeSilentSince = null;
        else {
          nodeSilentSince ??= Date.now();
          if (lost === 'down' || Date.now() - nodeSilentSince >= this.#nodeLossGraceMs)
            return this.#nodeLostResult(id, task.nodeId, lost);
        }
      }
      await sleep(this.#pollMs, options.signal);
    }
  }

  async #nodeLostResult(id: string, nodeId: string, why: 'down' | 'silent'): Promise<WaitResult> {
    const node = await this.nodeName(nodeId);
    // What the log API delivered is all there will be: the streams end (the result says node_lost).
    this.#feeds.get(id)?.endNow();
    return {
      kind: 'node_lost',
      node,
      message: `node ${node} was lost while the pair ran (${why === 'down' ? 'the swarm marked it down' : 'its engine stopped answering'}); the pair is not run again`,
    };
  }

  /** null: the node answers; `down`: the manager says so; `silent`: its engine does not answer. */
  async #nodeLost(nodeId: string): Promise<'down' | 'silent' | null> {
    try {
      const node = (await this.manager.getNode(nodeId).inspect(this.#call())) as {
        Status?: { State?: string };
      };
      if (node.Status?.State === 'down') return 'down';
    } catch {
      // the manager's view is a hint; the node's own engine decides below
    }
    try {
      const { engine } = await this.#nodeEngine(nodeId);
      await promised(engine.ping.bind(engine))({ abortSignal: AbortSignal.timeout(2_000) });
      return null;
    } catch {
      return 'silent';
    }
  }

  /** Controlled stop: scale to 0 (SIGTERM, SIGKILL after `timeoutSec`), then wait for the task to end within that budget. */
  async stop(id: string, timeoutSec: number): Promise<void> {
    const service = this.manager.getService(id);
    try {
      const current = (await service.inspect(this.#call())) as {
        Version: { Index: number };
        Spec: Record<string, unknown> & { TaskTemplate: { ContainerSpec: Record<string, unknown> } };
      };
      const spec = current.Spec;
      await promised(service.update.bind(service))({
        version: current.Version.Index,
        ...spec,
        TaskTemplate: {
          ...spec.TaskTemplate,
          ContainerSpec: { ...spec.TaskTemplate.ContainerSpec, StopGracePeriod: timeoutSec * 1e9 },
        },
        Mode: { Replicated: { Replicas: 0 } },
        ...this.#call(),
      });
    } catch (err) {
      if (statusOf(err) === 404) return;
      throw toEngineError(err, 'scale a swarm service to 0');
    }
    const until = Date.now() + (timeoutSec + 15) * 1000;
    while (Date.now() < until) {
      const task = await this.#task(id);
      if (task === undefined || task === null || TERMINAL.has(task.state)) return;
      // A task on a lost node never reports its end: nothing to wait for.
      if (task.nodeId !== null && task.nodeId !== '' && (await this.#nodeLost(task.nodeId)) !== null) return;
      await sleep(this.#pollMs);
    }
  }

  /** Remove the service (its task's container goes with it) and the pair's volumes on its node. */
  async remove(id: string): Promise<RemoveResult> {
    await this.#task(id).catch(() => undefined);
    await this.#completeLogs(id).catch(() => undefined);
    let result: RemoveResult = 'removed';
    try {
      await this.manager.getService(id).remove(this.#call());
    } catch (err) {
      if (statusOf(err) !== 404) throw toEngineError(err, 'remove a swarm service');
      result = 'absent';
    }
    // The node's agent removes the task's container on its own, some time after the service is gone; removing it
    // through the node's engine now lets the verified removal (its 404 there) and the volumes' removal follow at once.
    await this.#removeTaskContainer(id).catch(() => undefined);
    await this.#removeVolumes(id).catch(() => undefined);
    return result;
  }

  /** Force-removes the task's container on its node (absent, or already being removed: nothing to do). */
  async #removeTaskContainer(id: string): Promise<void> {
    const placement = this.#placements.get(id);
    if (placement === undefined || placement.nodeId === '' || placement.containerId === null) return;
    if (this.#downNodes.has(placement.nodeId) || this.#downNodes.has(await this.nodeName(placement.nodeId)))
      return;
    const { engine } = await this.#nodeEngine(placement.nodeId);
    try {
      await engine
        .getContainer(placement.containerId)
        .remove({ force: true, abortSignal: AbortSignal.timeout(CONTAINER_REMOVE_TIMEOUT_MS) });
    } catch (err) {
      if (statusOf(err) !== 404 && statusOf(err) !== 409) throw err;
    }
  }

  /** The pair's volumes on its node, once its container is gone there (in use before; retried by `inspect`). */
  async #removeVolumes(id: string): Promise<void> {
    const placement = this.#placements.get(id);
    if (placement === undefined || placement.nodeId === '') return;
    const { engine } = await this.#nodeEngine(placement.nodeId);
    for (const m of placement.mounts) {
      try {
        const volume = engine.getVolume(m.volume);
        await promised(volume.remove.bind(volume))(this.#call());
      } catch (err) {
        if (statusOf(err) !== 404 && statusOf(err) !== 409) throw err;
      }
    }
  }

  /**
   * The pair's state: from the task while the service exists; after removal, from the task's container on its node
   * (null once that engine answers 404, the verified removal). Throws when that node's engine does not answer.
   */
  async inspect(id: string): Promise<ContainerState | null> {
    const task = await this.#task(id);
    const placement = this.#placements.get(id);
    const labels: Record<string, string> = {};
    if (task === undefined) {
      // Not known here (another process placed it): every node's engine is asked for a container of this service.
      if (placement === undefined || placement.nodeId === '' || placement.containerId === null)
        return this.#findOnNodes(id);
      if (this.#downNodes.has(await this.nodeName(placement.nodeId)) || this.#downNodes.has(placement.nodeId))
        return null;
      const { engine, name } = await this.#nodeEngine(placement.nodeId);
      try {
        const c = (await engine.getContainer(placement.containerId).inspect(this.#call())) as RawContainer;
        return containerState(id, c);
      } catch (err) {
        if (statusOf(err) === 404) {
          await this.#removeVolumes(id).catch(() => undefined);
          return null;
        }
        throw toEngineError(err, `inspect the pair's container on node ${name}`);
      }
    }
    if (task === null)
      return {
        id,
        status: 'created',
        exitCode: null,
        oomKilled: false,
        startedAt: null,
        finishedAt: null,
        labels,
      };
    if (TERMINAL.has(task.state)) {
      void this.#completeLogs(id).catch(() => undefined);
      return {
        id,
        status: 'exited',
        exitCode: task.exitCode,
        oomKilled: false,
        startedAt: null,
        finishedAt: task.timestamp,
        labels,
      };
    }
    return {
      id,
      status: RUNNING.has(task.state) ? 'running' : 'created',
      exitCode: null,
      oomKilled: false,
      startedAt: null,
      finishedAt: null,
      labels,
    };
  }

  /**
   * A removed service's container, searched on every configured node's engine (label `com.docker.swarm.service.id`):
   * null only when each of them answers without one (nodes declared down are skipped). Throws when one cannot say.
   */
  async #findOnNodes(id: string): Promise<ContainerState | null> {
    for (const [node, url] of Object.entries(this.#nodeUrls)) {
      if (this.#downNodes.has(node)) continue;
      const engine = this.#engineForUrl(node, url);
      let found: { Id: string }[];
      try {
        found = await engine.listContainers({
          all: true,
          filters: JSON.stringify({ label: [`com.docker.swarm.service.id=${id}`] }),
          ...this.#call(),
        });
      } catch (err) {
        throw toEngineError(err, `look for the pair's container on node ${node}`);
      }
      const first = found[0];
      if (first === undefined) continue;
      try {
        return containerState(id, await engine.getContainer(first.Id).inspect(this.#call()));
      } catch (err) {
        if (statusOf(err) === 404) continue;
        throw toEngineError(err, `inspect the pair's container on node ${node}`);
      }
    }
    return null;
  }

  async environmentOf(id: string): Promise<Record<string, string> | null> {
    try {
      const s = (await this.manager.getService(id).inspect(this.#call())) as {
        Spec?: { TaskTemplate?: { ContainerSpec?: { Env?: string[] } } };
      };
      const env: Record<string, string> = {};
      for (const entry of s.Spec?.TaskTemplate?.ContainerSpec?.Env ?? []) {
        const eq = entry.indexOf('=');
        if (eq > 0) env[entry.slice(0, eq)] = entry.slice(eq + 1);
      }
      return env;
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw toEngineError(err, 'inspect a swarm service');
    }
  }

  /** Through the engine of the node that ran the task (the container keeps its volumes until removed). */
  async getArchive(id: string, path: string): Promise<Readable | null> {
    await this.#task(id).catch(() => undefined);
    const placement = this.#placements.get(id);
    if (placement === undefined || placement.nodeId === '' || placement.containerId === null) return null;
    const { engine, name } = await this.#nodeEngine(placement.nodeId);
    try {
      const container = engine.getContainer(placement.containerId);
      return (await promised(container.getArchive.bind(container))({ path, ...this.#call() })) as Readable;
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw toEngineError(err, `read ${path} from the pair's container on node ${name}`);
    }
  }

  /**
   * Copy what the pair wrote into its collected volumes (the outcome folder) back into their host folders, through
   * its node's engine, with the same safe extraction as Codex sessions (the pair is hostile).
   */
  async collectMounts(id: string): Promise<void> {
    const placement = this.#placements.get(id) ?? (await this.#mountsFromService(id));
    if (placement === undefined) return;
    for (const m of placement.mounts) {
      if (!m.collect) continue;
      const archive = await this.getArchive(id, m.target);
      if (archive === null) continue;
      const report = await extractArchiveSafely(archive, m.hostPath, {
        limits: COLLECT_LIMITS,
        signal: AbortSignal.timeout(COLLECT_TIMEOUT_MS),
      });
      if (report.refusals.length > 0)
        throw new Error(`collecting ${m.target} refused ${report.refusals.length} entr(ies)`);
    }
  }

  async #mountsFromService(id: string): Promise<Placement | undefined> {
    try {
      const s = (await this.manager.getService(id).inspect(this.#call())) as {
        Spec?: { Labels?: Record<string, string> };
      };
      const mounts = JSON.parse(s.Spec?.Labels?.[MOUNTS_LABEL] ?? '[]') as MountRecord[];
      const placement: Placement = { nodeId: '', containerId: null, mounts };
      this.#placements.set(id, placement);
      await this.#task(id);
      return placement;
    } catch {
      return undefined;
    }
  }

  async listByLabel(labels: Readonly<Record<string, string>>): Promise<ContainerState[]> {
    let services: { ID: string }[];
    try {
      services = (await promised(this.manager.listServices.bind(this.manager))({
        filters: JSON.stringify({ label: Object.entries(labels).map(([k, v]) => `${k}=${v}`) }),
        ...this.#call(),
      })) as { ID: string }[];
    } catch (err) {
      throw toEngineError(err, 'list swarm services');
    }
    const states: ContainerState[] = [];
    for (const s of services) {
      await this.#mountsFromService(s.ID);
      const state = await this.inspect(s.ID);
      if (state !== null) states.push({ ...state, labels: { ...labels } });
    }
    return states;
  }

  /** The swarm keeps no per-container event history we could trust: never conclusive. */
  containerEventsSince(
    _id: string,
    _sinceMs: number,
  ): Promise<{ actions: readonly string[]; complete: boolean }> {
    return Promise.resolve({ actions: [], complete: false });
  }
}

interface RawTask {
  ID: string;
  NodeID?: string;
  Version?: { Index?: number };
  Status?: {
    State?: string;
    Err?: string;
    Timestamp?: string;
    ContainerStatus?: { ContainerID?: string; ExitCode?: number };
  };
}

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

function gpusOf(node: RawNode): number {
  let count = 0;
  for (const r of node.Description?.Resources?.GenericResources ?? []) {
    if (r.NamedResourceSpec?.Kind === SWARM_GPU_RESOURCE) count += 1;
    if (r.DiscreteResourceSpec?.Kind === SWARM_GPU_RESOURCE) count += r.DiscreteResourceSpec.Value ?? 0;
  }
  return count;
}

interface RawContainer {
  State?: {
    Status?: string;
    ExitCode?: number;
    OOMKilled?: boolean;
    StartedAt?: string;
    FinishedAt?: string;
  };
  Config?: { Labels?: Record<string, string> };
}

function containerState(id: string, c: RawContainer): ContainerState {
  const status = (c.State?.Status ?? 'removing') as ContainerState['status'];
  return {
    id,
    status,
    exitCode: c.State?.ExitCode ?? null,
    oomKilled: c.State?.OOMKilled ?? false,
    startedAt: c.State?.StartedAt ?? null,
    finishedAt: c.State?.FinishedAt ?? null,
    labels: c.Config?.Labels ?? {},
  };
}

/** GPUs as generic resources: a count, or the number of listed ids (ids cannot be chosen on a swarm); "all" has no meaning there. */
export function gpuCountOf(spec: Pick<ContainerSpec, 'deviceRequests'>): number {
  let count = 0;
  for (const r of spec.deviceRequests) {
    if (r.DeviceIDs !== undefined) count += r.DeviceIDs.length;
    else if (r.Count !== undefined && r.Count > 0) count += r.Count;
    else
      throw new EngineError(
        'engine_error',
        'gpus "all" cannot be placed on a swarm: give the job a GPU count',
        {
          statusCode: null,
          engineMessage: 'gpus all on swarm',
        },
      );
  }
  return count;
}
