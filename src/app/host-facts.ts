import { gpuControllersFact, type HostFact, type HostFactsRecord } from '../core/host-facts.js';
import type { Clock } from './ports/clock.js';
import type { HostFactsRequest, HostFactsSource } from './ports/host-facts.js';
import { InternalError } from '../core/errors.js';

/** How long each fact may take; the calls run side by side, so this bounds the whole gathering too. */
export const HOST_FACTS_TIMEOUT_MS = 5_000;

export interface HostFactsDeps {
  readonly source: HostFactsSource;
  /** Each fact's timeout (a wait that the end of the gathering aborts). */
  readonly clock: Pick<Clock, 'sleep'>;
  readonly timeoutMs?: number;
}

/**
 * Every host fact, each bounded in time: a call that throws or does not answer within the timeout gives an
 * unknown fact with the reason; this never rejects and never waits longer than the timeout.
 */
export async function gatherHostFacts(
  deps: HostFactsDeps,
  request: HostFactsRequest,
): Promise<HostFactsRecord> {
  const stop = new AbortController();
  const timeoutMs = deps.timeoutMs ?? HOST_FACTS_TIMEOUT_MS;
  const bounded = <T extends object>(call: () => Promise<T>): Promise<HostFact<T>> =>
    boundedFact(call, () => deps.clock.sleep(timeoutMs, stop.signal).then(() => timeoutMs));
  const { source } = deps;
  try {
    const [cpu, memory, os, output_fs, engine_data_root_fs, gpu_controllers] = await Promise.all([
      bounded(() => source.cpu()),
      bounded(() => source.memory()),
      bounded(() => source.os()),
      bounded(() => source.fileSystemOf(request.outputDir, { nearestAncestor: true })),
      bounded(async () => {
        const root = await request.dataRoot;
        if (root === null) throw new InternalError('the engine did not report its data root');
        return source.fileSystemOf(root, { nearestAncestor: false });
      }),
      bounded(async () => gpuControllersFact(await source.gpuControllers())),
    ]);
    return { cpu, memory, os, output_fs, engine_data_root_fs, gpu_controllers };
  } finally {
    stop.abort(); // the timers still pending end now: nothing keeps the process alive after the facts
  }
}

/** What `e1-batch start` asks about: its output directory and the data root of the engine it runs pairs on. */
export function batchHostRequest(
  outputDir: string,
  engine: { readonly dataRoot?: string | undefined },
  executor: { readonly kind: string } | undefined,
): HostFactsRequest {
  // A swarm's pairs run on its nodes' engines: the manager's data root is not where their images and logs live.
  if (executor?.kind === 'swarm') {
    const onNodes = Promise.reject(new InternalError("swarm executor: the pairs run on the nodes' engines"));
    onNodes.catch(() => undefined); // read by gatherHostFacts, if at all
    return { outputDir, dataRoot: onNodes };
  }
  return { outputDir, dataRoot: engine.dataRoot ?? null };
}

const unknown = (reason: string): { kind: 'unknown'; reason: string } => ({ kind: 'unknown', reason });

async function boundedFact<T extends object>(
  call: () => Promise<T>,
  timeout: () => Promise<number>,
): Promise<HostFact<T>> {
  const answer = Promise.resolve()
    .then(call)
    .then(
      (value): HostFact<T> => ({ kind: 'known', ...value }),
      (err: unknown): HostFact<T> => unknown(err instanceof Error ? err.message : String(err)),
    );
  const late = timeout().then((ms): HostFact<T> => unknown(`no answer within ${ms} ms`));
  return Promise.race([answer, late]);
}
