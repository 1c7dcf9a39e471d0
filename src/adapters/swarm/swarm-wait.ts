import type { WaitResult } from '../../app/ports/container-runtime.js';
import { sleep } from '../system-clock.js';
import { EngineError } from '../../app/ports/engine-error.js';
import type { SwarmLogs } from './swarm-logs.js';
import type { SwarmNodes } from './swarm-nodes.js';
import { RUNNING, TERMINAL, type SwarmTasks, type TaskView } from './swarm-tasks.js';

/**
 * While a pair's node answers, its health (the manager's view and a ping of its engine) is checked this often, not
 * on every poll of the task: two calls fewer per poll and pair. A node that stopped answering is checked on every
 * poll, so the loss is still declared once the grace has passed (at most this much later for a node the manager
 * marks down).
 */
const NODE_CHECK_MS = 1_000;

export interface SwarmWaitParts {
  readonly tasks: Pick<SwarmTasks, 'task'>;
  readonly nodes: Pick<SwarmNodes, 'loss' | 'nodeName'>;
  readonly logs: Pick<SwarmLogs, 'complete' | 'endNow'>;
  readonly pollMs: number;
  /** A node whose engine does not answer for this long while its pair runs is lost. */
  readonly nodeLossGraceMs: number;
}

/**
 * Polls the pair's task until it ends (its log then completed), the deadline passes, the signal aborts, the manager
 * is lost (`engine_lost`) or the pair's node is (`node_lost`, a verdict: the pair is not run again).
 */
export async function waitForTask(
  parts: SwarmWaitParts,
  id: string,
  options: { deadlineMs: number; signal?: AbortSignal },
): Promise<WaitResult> {
  let lastSeenAliveMs = Date.now();
  let nodeSilentSince: number | null = null;
  let nodeCheckedAtMs = 0;
  for (;;) {
    if (options.signal?.aborted === true) return { kind: 'aborted' };
    if (Date.now() >= options.deadlineMs) return { kind: 'deadline' };
    let task: TaskView | null | undefined;
    try {
      task = await parts.tasks.task(id);
    } catch (err) {
      if (err instanceof EngineError && err.fault === 'engine_unavailable')
        return { kind: 'engine_lost', lastSeenAliveMs };
      throw err;
    }
    if (task === undefined) return { kind: 'engine_lost', lastSeenAliveMs };
    if (task !== null && TERMINAL.has(task.state)) return ended(parts, id, task);
    lastSeenAliveMs = Date.now();
    const nodeCheckDue = nodeSilentSince !== null || Date.now() - nodeCheckedAtMs >= NODE_CHECK_MS;
    const node = task === null ? null : placedOn(task);
    if (nodeCheckDue && task !== null && node !== null && isStarted(task)) {
      nodeCheckedAtMs = Date.now();
      const lost = await parts.nodes.loss(node);
      if (lost === null) nodeSilentSince = null;
      else {
        nodeSilentSince ??= Date.now();
        if (lost === 'down' || Date.now() - nodeSilentSince >= parts.nodeLossGraceMs)
          return nodeLost(parts, id, node, lost);
      }
    }
    await sleep(parts.pollMs, options.signal);
  }
}

function placedOn(task: TaskView): string | null {
  return task.nodeId !== null && task.nodeId !== '' ? task.nodeId : null;
}

function isStarted(task: TaskView): boolean {
  return RUNNING.has(task.state) || task.state === 'starting';
}

/** A terminal task: an exit, a lost node, or a task the node could not start (an engine fault, not an exit). */
async function ended(parts: SwarmWaitParts, id: string, task: TaskView): Promise<WaitResult> {
  // A task the swarm ended because its node went away (orphaned, or failed with the node down) did not exit.
  const node = placedOn(task);
  if (node !== null && (task.state === 'orphaned' || (await parts.nodes.loss(node)) !== null))
    return nodeLost(parts, id, node, task.state === 'orphaned' ? 'down' : 'silent');
  if (task.state === 'rejected' || (task.containerId === null && task.exitCode === null)) {
    // The node could not start the task (image missing there, a bad mount, …).
    const text = task.err ?? `task ${task.state}`;
    throw new EngineError(
      /no such image/i.test(text) ? 'image_missing' : 'engine_error',
      `the swarm could not run the pair's task: ${text}`,
      { statusCode: null, engineMessage: text },
    );
  }
  await parts.logs.complete(id);
  return { kind: 'exited', exitCode: task.exitCode ?? -1 };
}

async function nodeLost(
  parts: SwarmWaitParts,
  id: string,
  nodeId: string,
  why: 'down' | 'silent',
): Promise<WaitResult> {
  const node = await parts.nodes.nodeName(nodeId);
  // What the log API delivered is all there will be: the streams end (the result says node_lost).
  parts.logs.endNow(id);
  const cause = why === 'down' ? 'the swarm marked it down' : 'its engine stopped answering';
  return {
    kind: 'node_lost',
    node,
    message: `node ${node} was lost while the pair ran (${cause}); the pair is not run again`,
  };
}
