import { readFile } from 'node:fs/promises';
import { PassThrough, type Duplex, type Readable } from 'node:stream';
import type Docker from 'dockerode';
import type {
  ContainerDefaults,
  ContainerState,
  EngineInfo,
  ExecHandle,
  ExecSpec,
  PublishedPort,
  RemoveResult,
  RunningExec,
  SessionContainerDetail,
  SessionContainerSpec,
  SessionEngine,
} from '../../app/ports/container-runtime.js';
import type { NetworkMoves } from '../../app/ports/runtime-capabilities.js';
import { sleep } from '../system-clock.js';
import type { NetworkChoice } from '../../core/pair-network.js';
import { gpuRequestDropped } from '../../core/gpu/gpu-proof.js';
import { createOptions, createRequest } from './container-create.js';
import { demultiplex } from './demux.js';
import { inspectOr404 } from './docker-container-reads.js';
import type { DockerContainerRuntime } from './docker-container-runtime.js';
import { toEngineError } from './engine-error.js';
import { EngineError } from '../../app/ports/engine-error.js';

const CALL_TIMEOUT_MS = 60_000;
const START_TIMEOUT_MS = 180_000;
/** What a session container runs: it idles until stopped (init forwards SIGTERM, so a stop is quick). */
const IDLE_ENTRYPOINT = ['sleep'];
const IDLE_CMD = ['2147483647'];
const KILL_DEADLINE_MS = 30_000;
const KILL_RETRY_MS = 100;

interface ExecInspect {
  Pid?: number;
  ExitCode?: number | null;
  Running?: boolean;
}

function inspectExec(exec: Docker.Exec): Promise<ExecInspect> {
  return exec.inspect({ abortSignal: AbortSignal.timeout(CALL_TIMEOUT_MS) } as object);
}

/** The container's own pid of a host pid (last field of NSpid), when this host's /proc shows it. */
async function namespacePid(hostPid: number): Promise<number | null> {
  try {
    const status = await readFile(`/proc/${hostPid}/status`, 'utf8');
    const line = /^NSpid:\s*(.+)$/m.exec(status)?.[1];
    const last = line?.trim().split(/\s+/).at(-1);
    return last === undefined ? null : Number(last);
  } catch {
    return null;
  }
}

/**
 * Pipes `source` into the exec's stdin with backpressure and closes the write half at its end. When the exec stops
 * reading (it exited, or the connection closed), the rest of `source` is discarded, never buffered.
 */
function feedStdin(source: Readable, socket: Duplex): void {
  const stop = (): void => {
    source.unpipe(socket);
    source.resume();
  };
  socket.once('close', stop);
  socket.on('error', stop);
  source.once('error', () => socket.end());
  source.pipe(socket);
}

/**
 * SessionEngine over dockerode. The operations pairs and sessions share (ContainerEngine) are the pair runtime's
 * own mapped, idempotent calls; the create options are built where a pair's are (container-create.ts).
 */
export class DockerSessionEngine implements SessionEngine, NetworkMoves {
  readonly #docker: Docker;
  readonly #runtime: DockerContainerRuntime;

  constructor(runtime: DockerContainerRuntime) {
    this.#runtime = runtime;
    this.#docker = runtime.docker;
  }

  info(): Promise<EngineInfo> {
    return this.#runtime.info();
  }

  imageExists(image: string): Promise<boolean> {
    return this.#runtime.imageExists(image);
  }

  getArchive(id: string, path: string): Promise<Readable | null> {
    return this.#runtime.getArchive(id, path);
  }

  stop(id: string, timeoutSec: number): Promise<void> {
    return this.#runtime.stop(id, timeoutSec);
  }

  remove(id: string): Promise<RemoveResult> {
    return this.#runtime.remove(id);
  }

  inspect(id: string): Promise<ContainerState | null> {
    return this.#runtime.inspect(id);
  }

  listByLabel(labels: Readonly<Record<string, string>>): Promise<ContainerState[]> {
    return this.#runtime.listByLabel(labels);
  }

  async createAndStart(
    spec: SessionContainerSpec,
  ): Promise<{ id: string; ports: Record<string, PublishedPort> }> {
    // "bridge": the guarded pairs network, as for pairs (ensured first; a failure refuses the session).
    const options = createOptions(spec, await this.#runtime.networkMode(spec.network), {
      config: {
        // A caller's command keeps the image's entrypoint (docker run IMAGE CMD…); without one, the keep-alive.
        ...(spec.command !== undefined
          ? { Cmd: [...spec.command] }
          : { Entrypoint: IDLE_ENTRYPOINT, Cmd: IDLE_CMD }),
        ...(spec.user !== undefined ? { User: spec.user } : {}),
        ...(spec.workdir !== undefined ? { WorkingDir: spec.workdir } : {}),
      },
      hostConfig: {
        ...(spec.extraHosts !== undefined && spec.extraHosts.length > 0
          ? { ExtraHosts: [...spec.extraHosts] }
          : {}),
        ...(spec.nanoCpus !== undefined ? { NanoCpus: spec.nanoCpus } : {}),
        ...(spec.memoryBytes !== undefined ? { Memory: spec.memoryBytes } : {}),
      },
      capabilities: spec.capabilities,
      seccomp: await this.#runtime.seccomp.option(),
    });
    let id: string;
    try {
      id = (await this.#docker.createContainer(createRequest(options, AbortSignal.timeout(CALL_TIMEOUT_MS))))
        .id;
    } catch (err) {
      throw toEngineError(err, 'create a container', spec.image);
    }
    // A GPU request the engine dropped (Podman 4): the session is refused before anything runs in it (issue 28).
    await this.#refuseDroppedGpus(id, spec);
    try {
      const container = this.#docker.getContainer(id);
      await container.start({ abortSignal: AbortSignal.timeout(START_TIMEOUT_MS) });
      // The inspect after the start only reads where the ports were published: without any, nothing to ask.
      if (spec.ports.length === 0) return { id, ports: {} };
      const inspected = await container.inspect({ abortSignal: AbortSignal.timeout(CALL_TIMEOUT_MS) });
      const ports: Record<string, PublishedPort> = {};
      for (const [key, bindings] of Object.entries(inspected.NetworkSettings.Ports ?? {})) {
        const first = (bindings as { HostIp: string; HostPort: string }[] | null)?.[0];
        if (first)
          ports[key.replace(/\/tcp$/, '')] = { host_ip: first.HostIp, host_port: Number(first.HostPort) };
      }
      return { id, ports };
    } catch (err) {
      // A container left `created` (port taken, no NVIDIA runtime) must still go.
      await this.#runtime.remove(id).catch(() => undefined);
      throw toEngineError(err, 'start a container', spec.image);
    }
  }

  async #refuseDroppedGpus(id: string, spec: SessionContainerSpec): Promise<void> {
    if (spec.deviceRequests.length === 0) return;
    let dropped: string | null;
    try {
      const grant = await this.#runtime.gpuGrantOf(id);
      dropped =
        grant === null
          ? 'the container vanished after its create'
          : gpuRequestDropped(spec.deviceRequests, grant);
    } catch (err) {
      await this.#runtime.remove(id).catch(() => undefined);
      throw toEngineError(err, 'inspect a container', spec.image);
    }
    if (dropped === null) return;
    await this.#runtime.remove(id).catch(() => undefined);
    throw new EngineError('gpu_request_dropped', `GPU request dropped by the engine: ${dropped}`, {
      statusCode: null,
      engineMessage: `${dropped} (Podman drops Docker DeviceRequests: docs/podman.md)`,
    });
  }

  async exec(id: string, spec: ExecSpec): Promise<ExecHandle> {
    const { exec, socket } = await this.#startExec(id, spec);
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    if (Buffer.isBuffer(spec.stdin)) socket.end(spec.stdin);
    else if (spec.stdin !== undefined) feedStdin(spec.stdin, socket);
    const finished = demultiplex(socket, stdout, stderr).catch(() => undefined);
    const inspected = finished.then(() => inspectExec(exec).catch(() => null));
    const done = inspected.then((info) =>
      info !== null && typeof info.ExitCode === 'number' && info.Running !== true ? info.ExitCode : null,
    );
    // An exec the runtime could not start has no process: Docker reports pid 0 and 126 or 127 (a command that exits
    // so itself keeps its pid), and what it wrote on the stream is the runtime's error, which may name the host's
    // paths. Podman reports pid 0 for every exec that ended: the caller also asks for the runtime's words.
    const started = inspected.then(
      (info) =>
        info === null ||
        info.Running === true ||
        info.Pid !== 0 ||
        (info.ExitCode !== 126 && info.ExitCode !== 127),
    );
    return {
      stdout,
      stderr,
      done,
      started,
      killTree: () => this.#killTree(id, exec),
      abandon: () => socket.destroy(),
    };
  }

  /** Creates the exec and hijacks its stream (stdin attached only when there is some). */
  async #startExec(id: string, spec: ExecSpec): Promise<{ exec: Docker.Exec; socket: Duplex }> {
    try {
      const exec = await this.#docker.getContainer(id).exec({
        Cmd: [...spec.argv],
        AttachStdout: true,
        AttachStderr: true,
        AttachStdin: spec.stdin !== undefined,
        Tty: false,
        ...(spec.env ? { Env: Object.entries(spec.env).map(([k, v]) => `${k}=${v}`) } : {}),
        ...(spec.cwd !== undefined ? { WorkingDir: spec.cwd } : {}),
        ...(spec.user !== undefined ? { User: spec.user } : {}),
        abortSignal: AbortSignal.timeout(CALL_TIMEOUT_MS),
      });
      const socket = await exec.start({ hijack: true, stdin: spec.stdin !== undefined });
      return { exec, socket };
    } catch (err) {
      throw toEngineError(err, 'run a command in a container');
    }
  }

  /** SIGKILL to the exec's process group until it is gone; on a busy engine the exec may not have a pid yet. */
  async #killTree(id: string, exec: Docker.Exec): Promise<void> {
    const deadline = Date.now() + KILL_DEADLINE_MS;
    while (Date.now() < deadline) {
      const info = await inspectExec(exec);
      if (info.Running === false && typeof info.ExitCode === 'number') return;
      if (info.Pid && info.Running === true) await this.#killGroup(id, info.Pid);
      await sleep(KILL_RETRY_MS);
    }
    throw new Error('the exec was still running after its process group was killed');
  }

  async #killGroup(id: string, hostPid: number): Promise<void> {
    try {
      // The exec is a session and group leader: its group is the exec's process tree.
      process.kill(-hostPid, 'SIGKILL');
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ESRCH') return;
    }
    // Not allowed from here (the server is not root): kill the group from inside the container.
    const inner = await namespacePid(hostPid);
    if (inner === null) throw new Error("cannot find the exec's process to kill it");
    const killer = await this.exec(id, { argv: ['kill', '-9', '--', `-${inner}`], user: '0' });
    killer.stdout.resume();
    killer.stderr.resume();
    await killer.done;
  }

  async putArchive(id: string, dir: string, tar: Readable): Promise<void> {
    try {
      await this.#docker.getContainer(id).putArchive(tar, { path: dir });
    } catch (err) {
      throw toEngineError(err, 'copy files into a container');
    }
  }

  async moveNetwork(id: string, to: NetworkChoice): Promise<void> {
    const signal = AbortSignal.timeout(CALL_TIMEOUT_MS);
    const c = await inspectOr404(this.#docker, id, signal);
    if (c === null)
      throw new EngineError('engine_error', `container ${id} is gone`, {
        statusCode: 404,
        engineMessage: 'no such container',
      });
    for (const name of Object.keys(c.NetworkSettings.Networks ?? {})) {
      try {
        await this.#docker.getNetwork(name).disconnect({ Container: id, Force: true, abortSignal: signal });
      } catch (err) {
        throw toEngineError(err, 'disconnect a container from a network', name);
      }
    }
    if (to === 'none') return;
    const network = await this.#runtime.networkMode(to);
    try {
      await this.#docker.getNetwork(network).connect({ Container: id });
    } catch (err) {
      throw toEngineError(err, 'connect a container to a network', network);
    }
  }

  async detail(id: string): Promise<SessionContainerDetail | null> {
    const c = await inspectOr404(this.#docker, id, AbortSignal.timeout(CALL_TIMEOUT_MS));
    if (c === null) return null;
    const networks = Object.values(c.NetworkSettings.Networks ?? {}) as { IPAddress?: string }[];
    const ip = networks.map((n) => n.IPAddress ?? '').find((a) => a !== '') ?? null;
    return {
      workdir: c.Config.WorkingDir === '' ? '/' : c.Config.WorkingDir,
      user: c.Config.User,
      ipAddress: ip,
    };
  }

  async runningExecs(id: string): Promise<readonly RunningExec[]> {
    const c = await inspectOr404(this.#docker, id, AbortSignal.timeout(CALL_TIMEOUT_MS));
    const running: RunningExec[] = [];
    for (const execId of c?.ExecIDs ?? []) {
      let info: ExecInspect & { ProcessConfig?: { entrypoint?: string; arguments?: string[] } };
      try {
        info = await inspectExec(this.#docker.getExec(execId));
      } catch {
        continue; // gone in between
      }
      if (info.Running !== true) continue;
      const config = info.ProcessConfig ?? {};
      running.push({ id: execId, argv: [config.entrypoint ?? '', ...(config.arguments ?? [])] });
    }
    return running;
  }

  killExec(containerId: string, execId: string): Promise<void> {
    return this.#killTree(containerId, this.#docker.getExec(execId));
  }

  async containerDefaults(id: string): Promise<ContainerDefaults | null> {
    const c = await inspectOr404(this.#docker, id, AbortSignal.timeout(CALL_TIMEOUT_MS));
    return c && { workingDir: c.Config.WorkingDir ?? '', user: c.Config.User ?? '' };
  }
}
