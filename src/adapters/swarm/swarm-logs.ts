import type Docker from 'dockerode';
import type { Readable } from 'node:stream';
import type { ContainerOutput } from '../../app/ports/container-runtime.js';
import type { Logger } from '../../app/ports/logger.js';
import { errorKind } from '../../core/errors.js';
import { toEngineError } from '../docker/engine-error.js';
import { LogFeed } from './log-feed.js';
import { asStream, callOptions, promised } from './swarm-connection.js';
import type { SwarmNodes } from './swarm-nodes.js';
import type { SwarmTasks } from './swarm-tasks.js';

const LOG_COMPLETION_TIMEOUT_MS = 20_000;

/** Each pair's log: a feed that follows the service's log, completed (each byte once) when the task has ended. */
export class SwarmLogs {
  readonly #manager: Docker;
  readonly #nodes: SwarmNodes;
  readonly #tasks: SwarmTasks;
  readonly #logger: Logger;
  readonly #feeds = new Map<string, LogFeed>();

  constructor(manager: Docker, nodes: SwarmNodes, tasks: SwarmTasks, logger: Logger) {
    this.#manager = manager;
    this.#nodes = nodes;
    this.#tasks = tasks;
    this.#logger = logger;
  }

  /** The service's log, from its first byte; a new feed each time (a reattach starts over and skips what is on disk). */
  async open(id: string): Promise<ContainerOutput> {
    const feed = new LogFeed();
    this.#feeds.set(id, feed);
    try {
      const service = this.#manager.getService(id);
      const source = (await promised(service.logs.bind(service))({
        follow: true,
        stdout: true,
        stderr: true,
        ...callOptions(),
      })) as Readable;
      feed.attachSource(source);
    } catch (err) {
      this.#feeds.delete(id);
      throw toEngineError(err, 'follow service logs');
    }
    return { stdout: feed.stdout, stderr: feed.stderr };
  }

  /** No more bytes will come (the pair's node is lost): its streams end with what was delivered. */
  endNow(id: string): void {
    this.#feeds.get(id)?.endNow();
  }

  /** Ends the log feed of a task that no longer runs (bounded). Never rejects: a log not read whole ends in error. */
  async complete(id: string): Promise<void> {
    const feed = this.#feeds.get(id);
    if (feed === undefined) return;
    try {
      await feed.complete(() => this.#readWhole(id), LOG_COMPLETION_TIMEOUT_MS);
    } catch (err) {
      // LogFeed.complete settles its streams itself and does not reject; should it ever, it is said, not thrown.
      this.#logger.error({ service: id, err: errorKind(err) }, 'swarm log completion failed');
    }
  }

  /** `complete` without waiting for it (the task was seen ended by a call that does not return the log). */
  completeSoon(id: string): void {
    void this.complete(id);
  }

  /**
   * The task's container on its node first: once that engine calls the container exited its log is whole (the
   * engine waits for the output copiers), whereas the manager's service log is relayed by the node's agent and can
   * still lack the last (partial) line right after the task ends. The service log when the node cannot say.
   */
  async #readWhole(id: string): Promise<Readable> {
    const placement = this.#tasks.known(id);
    if (placement !== undefined && placement.nodeId !== '' && placement.containerId !== null) {
      try {
        const { engine } = await this.#nodes.engineOf(placement.nodeId);
        const container = engine.getContainer(placement.containerId);
        const state = (await container.inspect(callOptions())) as { State?: { Running?: boolean } };
        if (state.State?.Running === false) {
          const options = { follow: false, stdout: true, stderr: true, ...callOptions() };
          return asStream(await promised(container.logs.bind(container))(options));
        }
      } catch (err) {
        this.#logger.debug(
          { service: id, err: errorKind(err) },
          "the node's log is not readable; the service log is read",
        );
      }
    }
    const service = this.#manager.getService(id);
    const options = { follow: false, stdout: true, stderr: true, ...callOptions() };
    return asStream(await promised(service.logs.bind(service))(options));
  }
}
