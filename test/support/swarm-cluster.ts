import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { promisify } from 'node:util';
import Docker from 'dockerode';
import { namespaceSupportProblem, startSecondEngine, type SecondEngine } from './second-engine.js';

/**
 * A swarm of throwaway engines on this machine: each dockerd in its own network
 * namespace and with its own hostname, a veth pair (or a small chain of them) between the namespaces, `swarm init`
 * on the first, `swarm join` from the others, the pair-driver image copied into each, fake GPUs as generic resources
 * (`NVIDIA-GPU=GPU-fake-<node>-<i>`). The shared engine is only read from (image copy), never put in swarm mode.
 */
export interface SwarmNode {
  readonly hostname: string;
  readonly engine: SecondEngine;
  readonly url: string;
  readonly address: string;
}

export interface SwarmCluster {
  readonly nodes: readonly SwarmNode[];
  /** The manager's engine (the first node). */
  readonly managerUrl: string;
  /** `--node-engine` values, one per node. */
  readonly nodeEngineFlags: readonly string[];
  /** The CLI flags that select this swarm: --executor swarm --manager … --node-engine … */
  readonly flags: readonly string[];
  /** swarm leave --force on each node, SIGTERM each dockerd by pid, unmount leftovers, delete the namespaces. Idempotent. */
  stop(): Promise<void>;
}

const exec = promisify(execFile);
const READY_DEADLINE_MS = 60_000;
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Why a swarm of throwaway engines cannot be made here, or null. */
export async function swarmSupportProblem(): Promise<string | null> {
  const problem = await namespaceSupportProblem();
  if (problem !== null) return problem;
  try {
    await exec('unshare', ['--version']);
  } catch (err) {
    return `unshare is not available (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`;
  }
  return null;
}

/** `describe.skipIf` reason for the swarm suites; with REQUIRE_SWARM=1 a missing capability fails instead. */
export async function swarmSkipReason(): Promise<string | null> {
  const problem = await swarmSupportProblem();
  if (problem !== null && process.env['REQUIRE_SWARM'] === '1')
    throw new Error(`REQUIRE_SWARM=1 but a swarm of throwaway engines cannot run here: ${problem}`);
  if (problem !== null) process.stderr.write(`swarm tests skipped: ${problem}\n`);
  return problem;
}

export async function startSwarmCluster(
  options: {
    readonly nodes?: number;
    readonly gpusPerNode?: number;
    readonly tag?: string;
    /** More dockerd arguments for every node (e.g. `--insecure-registry 10.231.1.1:PORT`). */
    readonly extraArgs?: readonly string[];
  } = {},
): Promise<SwarmCluster> {
  const count = options.nodes ?? 2;
  const gpus = options.gpusPerNode ?? 2;
  const run = randomUUID().slice(0, 6);
  const tag = options.tag ?? 'swarm';
  const started: SecondEngine[] = [];
  const links: string[] = [];
  let stopped: Promise<void> | undefined;
  const engines = (): Docker[] => started.map((e) => new Docker({ socketPath: e.socketPath }));
  const stop = (): Promise<void> =>
    (stopped ??= (async () => {
      for (const docker of engines().reverse())
        await docker.swarmLeave({ force: true }).catch(() => undefined);
      const failures: unknown[] = [];
      for (const engine of started.reverse()) await engine.stop().catch((err: unknown) => failures.push(err));
      for (const link of links) await exec('ip', ['link', 'delete', link]).catch(() => undefined); // gone with its netns normally
      if (failures.length > 0) throw failures[0];
    })());
  try {
    const hostnames = Array.from({ length: count }, (_, i) => `rg${run}n${i + 1}`);
    // One at a time: each copies the image out of the shared engine (parallel copies only contend on 2 cores).
    for (const [i, hostname] of hostnames.entries()) {
      started.push(
        await startSecondEngine({
          nvidiaHook: false,
          name: `${tag}${i + 1}`,
          hostname,
          extraArgs: Array.from({ length: gpus }, (_, g) => [
            '--node-generic-resource',
            `NVIDIA-GPU=GPU-fake-${i + 1}-${g}`,
          ])
            .flat()
            .concat(options.extraArgs ?? []),
        }),
      );
    }
    // A veth from the manager's namespace to each other node's: 10.231.<i>.1 (manager side) ↔ 10.231.<i>.2.
    const addresses: string[] = [];
    for (let i = 1; i < count; i++) {
      const a = `rg${run}a${i}`;
      const b = `rg${run}b${i}`;
      await exec('ip', ['link', 'add', a, 'type', 'veth', 'peer', 'name', b]);
      links.push(a);
      await exec('ip', ['link', 'set', a, 'netns', started[0]!.netns]);
      await exec('ip', ['link', 'set', b, 'netns', started[i]!.netns]);
      await nsExec(started[0]!.netns, ['ip', 'addr', 'add', `10.231.${i}.1/24`, 'dev', a]);
      await nsExec(started[0]!.netns, ['ip', 'link', 'set', a, 'up']);
      await nsExec(started[i]!.netns, ['ip', 'addr', 'add', `10.231.${i}.2/24`, 'dev', b]);
      await nsExec(started[i]!.netns, ['ip', 'link', 'set', b, 'up']);
      addresses[i] = `10.231.${i}.2`;
    }
    for (const e of started) await nsExec(e.netns, ['ip', 'link', 'set', 'lo', 'up']);
    const managerAddress = count > 1 ? '10.231.1.1' : '127.0.0.1';
    addresses[0] = managerAddress;
    const [manager, ...workers] = engines();
    // A short dispatcher heartbeat: a killed worker is marked down within seconds (node-loss tests).
    await manager!.swarmInit({
      ListenAddr: '0.0.0.0:2377',
      AdvertiseAddr: managerAddress,
      Spec: { Dispatcher: { HeartbeatPeriod: 1_000_000_000 } },
    });
    const token = ((await manager!.swarmInspect()) as { JoinTokens: { Worker: string } }).JoinTokens.Worker;
    for (const [i, worker] of workers.entries()) {
      await worker.swarmJoin({
        ListenAddr: '0.0.0.0:2377',
        AdvertiseAddr: addresses[i + 1],
        RemoteAddrs: [`10.231.${i + 1}.1:2377`],
        JoinToken: token,
      });
    }
    const deadline = Date.now() + READY_DEADLINE_MS;
    for (;;) {
      const nodes = (await manager!.listNodes()) as {
        Status?: { State?: string };
        Description?: { Resources?: { GenericResources?: unknown[] } };
      }[];
      const ready = nodes.filter(
        (n) =>
          n.Status?.State === 'ready' && (n.Description?.Resources?.GenericResources?.length ?? 0) === gpus,
      );
      if (ready.length === count) break;
      if (Date.now() > deadline)
        throw new Error(
          `swarm not ready within ${READY_DEADLINE_MS} ms: ${JSON.stringify(nodes.map((n) => n.Status))}`,
        );
      await sleep(200);
    }
    const nodes: SwarmNode[] = started.map((engine, i) => ({
      hostname: hostnames[i]!,
      engine,
      url: `unix://${engine.socketPath}`,
      address: addresses[i]!,
    }));
    const managerUrl = nodes[0]!.url;
    const nodeEngineFlags = nodes.map((n) => `${n.hostname}=${n.url}`);
    return {
      nodes,
      managerUrl,
      nodeEngineFlags,
      flags: [
        '--executor',
        'swarm',
        '--manager',
        managerUrl,
        ...nodeEngineFlags.flatMap((f) => ['--node-engine', f]),
      ],
      stop,
    };
  } catch (err) {
    await stop().catch(() => undefined);
    throw err;
  }
}

async function nsExec(netns: string, argv: readonly string[]): Promise<void> {
  await exec('nsenter', [`--net=/run/netns/${netns}`, ...argv]);
}

/** Everything of ours left on a node: services (manager only), containers and volumes carrying `label`. */
export async function leftovers(
  node: SwarmNode,
  label: string,
  manager: boolean,
): Promise<{ services: number; containers: number; volumes: number }> {
  const docker = new Docker({ socketPath: node.engine.socketPath });
  const filters = JSON.stringify({ label: [label] });
  const services = manager ? ((await docker.listServices({ filters })) as unknown[]).length : 0;
  const containers = ((await docker.listContainers({ all: true, filters })) as unknown[]).length;
  const volumes = ((await docker.listVolumes({ filters })) as { Volumes?: unknown[] }).Volumes?.length ?? 0;
  return { services, containers, volumes };
}
