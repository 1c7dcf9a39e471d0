import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, open, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { promisify } from 'node:util';
import Docker from 'dockerode';
import { PAIR_DRIVER_IMAGE } from '../../src/core/synthetic-images.js';

/**
 * A second, throwaway Docker engine in its own network namespace (measured here: started in the
 * host namespace with `--bridge=none` it would delete the shared engine's docker0). The shared engine
 * at /var/run/docker.sock is only read from (the pair-driver image is copied out of it), never touched.
 */
export interface SecondEngine {
  readonly socketPath: string;
  /** The running dockerd's pid (a new one after `restart`). */
  readonly pid: number;
  readonly dataRoot: string;
  readonly netns: string;
  /** SIGTERM by pid (SIGKILL after a deadline), unmount leftovers, remove the temp dir, delete the netns. Idempotent. */
  stop(): Promise<void>;
  /** SIGKILL this dockerd (the daemon-restart tests); resolves once the process is gone. Its containers' shims live on. */
  kill(): Promise<void>;
  /** Start the same dockerd again on the same data root; resolves when it answers (retried: a first start after a kill can fail). */
  restart(): Promise<void>;
}

export interface SecondEngineOptions {
  /** Put a no-op `nvidia-container-runtime-hook` on dockerd's PATH: the engine then accepts NVIDIA device requests. */
  readonly nvidiaHook: boolean;
  /** Short tag for the netns and temp dir names (letters, digits, dashes). */
  readonly name?: string;
  /** Images copied in from the main engine (default: the pair-driver image). */
  readonly images?: readonly string[];
  /** Its own UTS namespace with this hostname (swarm nodes are told apart by hostname). */
  readonly hostname?: string;
  /** More dockerd arguments (e.g. `--node-generic-resource NVIDIA-GPU=GPU-fake-0`). */
  readonly extraArgs?: readonly string[];
  /**
   * The engine's own firewall rules and default bridge on (default: `--iptables=false --bridge=none`). Only ever inside
   * the engine's own network namespace (its loopback is brought up first): the host's rules are never touched.
   */
  readonly firewall?: boolean;
}

const exec = promisify(execFile);
const ANSWER_DEADLINE_MS = 30_000;
const RESTART_DEADLINE_MS = 60_000;
const STOP_DEADLINE_MS = 20_000;
const KILL_DEADLINE_MS = 5_000;
const POLL_MS = 100;
const NOOP_HOOK =
  '#!/bin/sh\n# no-op stand-in for the NVIDIA hook: consume the OCI state and succeed\ncat >/dev/null\nexit 0\n';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Why a second engine cannot be started here, or null when it can (root, `ip`, `nsenter`, `dockerd`, a probe netns). */
export async function namespaceSupportProblem(): Promise<string | null> {
  if (process.getuid?.() !== 0) return 'not running as root';
  for (const [tool, args] of [
    ['ip', ['-V']],
    ['nsenter', ['--version']],
    ['dockerd', ['--version']],
  ] as const) {
    try {
      await exec(tool, [...args]);
    } catch (err) {
      return `${tool} is not available (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`;
    }
  }
  const probe = `rgprobe-${randomUUID().slice(0, 8)}`;
  try {
    await exec('ip', ['netns', 'add', probe]);
  } catch (err) {
    return `ip netns add failed: ${(err as { stderr?: string }).stderr?.trim() ?? (err as Error).message}`;
  }
  try {
    await exec('ip', ['netns', 'delete', probe]);
  } catch (err) {
    return `ip netns delete failed: ${(err as { stderr?: string }).stderr?.trim() ?? (err as Error).message}`;
  }
  return null;
}

export async function canCreateNamespaces(): Promise<boolean> {
  return (await namespaceSupportProblem()) === null;
}

/** Network namespaces that exist now (names only). */
export async function listNetns(): Promise<string[]> {
  const { stdout } = await exec('ip', ['netns', 'list']);
  return stdout
    .split('\n')
    .map((line) => line.trim().split(/\s+/)[0] ?? '')
    .filter((name) => name !== '');
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  // A zombie still answers kill(0): look at its state.
  return processState(pid) !== 'Z';
}

/** The state letter of /proc/PID/stat (R, S, Z…), or null when the process is gone. Synchronous: usable in expectations. */
function processState(pid: number): string | null {
  const stat = procText(pid, 'stat');
  return stat === '' ? null : (stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0] ?? null);
}

function procText(pid: number, file: string): string {
  try {
    return readFileSync(`/proc/${pid}/${file}`, 'utf8');
  } catch {
    return '';
  }
}

function exitOf(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });
}

async function within(promise: Promise<void>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([promise.then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

async function waitUntilAnswers(docker: Docker, child: ChildProcess, logPath: string): Promise<void> {
  const deadline = Date.now() + ANSWER_DEADLINE_MS;
  let lastError = '';
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(
        `second dockerd exited early (${child.exitCode ?? child.signalCode}); log:\n${await readLog(logPath)}`,
      );
    }
    try {
      await docker.ping();
      return;
    } catch (err) {
      lastError = (err as Error).message;
    }
    await sleep(POLL_MS);
  }
  throw new Error(
    `second dockerd did not answer within ${ANSWER_DEADLINE_MS} ms (${lastError}); log:\n${await readLog(logPath)}`,
  );
}

async function readLog(path: string): Promise<string> {
  try {
    const text = await readFile(path, 'utf8');
    return text.length > 8_000 ? `…${text.slice(-8_000)}` : text;
  } catch {
    return '<no log>';
  }
}

async function drain(stream: Readable): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.from(chunk as Buffer));
  return Buffer.concat(chunks).toString('utf8');
}

/** `docker save IMAGE | docker -H second load`, through the API. */
async function copyImage(from: Docker, to: Docker, image: string): Promise<void> {
  const tar = (await from.getImage(image).get()) as Readable;
  const progress = (await to.loadImage(tar)) as Readable;
  const text = await drain(progress);
  if (/"error(Detail)?"/.test(text))
    throw new Error(`loading ${image} into the second engine failed: ${text}`);
  await to.getImage(image).inspect();
}

/** Mount points at or under `root`, deepest first. */
export async function mountsUnder(root: string): Promise<string[]> {
  const text = await readFile('/proc/mounts', 'utf8');
  return text
    .split('\n')
    .map((line) => (line.split(' ')[1] ?? '').replace(/\\040/g, ' '))
    .filter((mount) => mount === root || mount.startsWith(`${root}/`))
    .sort((a, b) => b.length - a.length);
}

async function unmountAll(root: string): Promise<void> {
  for (const mount of await mountsUnder(root)) {
    await exec('umount', [mount]).catch(() => exec('umount', ['-l', mount]).catch(() => undefined));
  }
}

async function waitForDeath(pid: number, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (isAlive(pid)) {
    if (Date.now() > deadline) return false;
    await sleep(POLL_MS);
  }
  return true;
}

/** After a hard kill of dockerd its managed containerd can outlive it: end it by the pid dockerd recorded (if it is ours). */
async function stopManagedContainerd(execRoot: string): Promise<void> {
  const pid = Number(
    (await readFile(join(execRoot, 'containerd', 'containerd.pid'), 'utf8').catch(() => '')).trim(),
  );
  if (!Number.isSafeInteger(pid) || pid <= 0 || !isAlive(pid)) return;
  if (!procText(pid, 'cmdline').includes(execRoot)) return; // pid reused by someone else
  process.kill(pid, 'SIGTERM');
  if (await waitForDeath(pid, STOP_DEADLINE_MS)) return;
  process.kill(pid, 'SIGKILL');
  if (!(await waitForDeath(pid, KILL_DEADLINE_MS)))
    throw new Error(`containerd ${pid} of the second engine survived SIGKILL`);
}

/**
 * Container shims of this engine that outlived it (its dockerd was SIGKILLed while a container ran and never cleaned
 * up after): each found by its containerd address under our exec root, its children (the container's init) first.
 */
async function killShims(execRoot: string): Promise<void> {
  const { readdir } = await import('node:fs/promises');
  const pids = (await readdir('/proc')).filter((name) => /^\d+$/.test(name)).map(Number);
  const shims = pids.filter((pid) => {
    const cmdline = procText(pid, 'cmdline');
    return cmdline.includes('containerd-shim') && cmdline.includes(`${execRoot}/`);
  });
  for (const shim of shims) {
    for (const pid of pids) {
      const stat = procText(pid, 'stat');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === shim) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    }
    try {
      process.kill(shim, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}

async function deleteNetns(name: string): Promise<void> {
  if ((await listNetns()).includes(name)) await exec('ip', ['netns', 'delete', name]);
}

/** Starts the engine and copies the images in. On any failure everything created so far is torn down. */
export async function startSecondEngine(options: SecondEngineOptions): Promise<SecondEngine> {
  const tag = (options.name ?? 'engine').replace(/[^A-Za-z0-9-]/g, '').slice(0, 16) || 'engine';
  const netns = `rg-${tag}-${randomUUID().slice(0, 8)}`;
  const dir = await mkdtemp(`/tmp/rg-${tag}-`);
  // With `--userns-remap` the engine refuses a data root the remapped root cannot traverse (mkdtemp makes it 0700).
  if (options.extraArgs?.some((a) => a.startsWith('--userns-remap')) === true) await chmod(dir, 0o711);
  const dataRoot = join(dir, 'data');
  const execRoot = join(dir, 'exec');
  const socketPath = join(dir, 'docker.sock');
  const logPath = join(dir, 'dockerd.log');
  const binDir = join(dir, 'bin');
  let child: ChildProcess | undefined;
  let netnsCreated = false;
  let stopped: Promise<void> | undefined;

  const teardown = async (): Promise<void> => {
    if (child?.pid !== undefined) {
      const exited = exitOf(child);
      if (isAlive(child.pid)) child.kill('SIGTERM');
      if (!(await within(exited, STOP_DEADLINE_MS))) {
        child.kill('SIGKILL');
        if (!(await within(exited, KILL_DEADLINE_MS)))
          throw new Error(`second dockerd ${child.pid} survived SIGKILL`);
      }
    }
    await stopManagedContainerd(execRoot);
    await killShims(execRoot);
    await unmountAll(dir);
    await rm(dir, { recursive: true, force: true });
    if (netnsCreated) await deleteNetns(netns);
  };
  const stop = (): Promise<void> => (stopped ??= teardown());
  const spawnDockerd = async (): Promise<ChildProcess> => {
    const log = await open(logPath, 'a');
    try {
      // With a hostname: `unshare -u sh -c 'hostname NODE; exec dockerd …'` (both exec: the pid stays dockerd's).
      const prefix =
        options.hostname !== undefined
          ? ['unshare', '-u', 'sh', '-c', 'hostname "$0" && exec "$@"', options.hostname]
          : [];
      return spawn(
        'nsenter',
        [
          `--net=/run/netns/${netns}`,
          ...prefix,
          'dockerd',
          '--data-root',
          dataRoot,
          '--exec-root',
          execRoot,
          '--pidfile',
          join(dir, 'dockerd.pid'),
          '-H',
          `unix://${socketPath}`,
          ...(options.firewall === true ? [] : ['--iptables=false', '--bridge=none']),
          ...(options.extraArgs ?? []),
        ],
        {
          stdio: ['ignore', log.fd, log.fd],
          env: {
            ...process.env,
            PATH: `${binDir}:${process.env['PATH'] ?? '/usr/sbin:/usr/bin:/sbin:/bin'}`,
          },
        },
      );
    } finally {
      await log.close();
    }
  };

  const kill = async (): Promise<void> => {
    if (child?.pid === undefined) return;
    const exited = exitOf(child);
    child.kill('SIGKILL');
    if (!(await within(exited, KILL_DEADLINE_MS)))
      throw new Error(`second dockerd ${child.pid} survived SIGKILL`);
  };

  const restart = async (): Promise<void> => {
    const docker = new Docker({ socketPath });
    const deadline = Date.now() + RESTART_DEADLINE_MS;
    for (;;) {
      child = await spawnDockerd();
      try {
        await waitUntilAnswers(docker, child, logPath);
        return;
      } catch (err) {
        // After a hard kill the first start may fail while dockerd cleans up (seen on these machines): try again.
        if (Date.now() > deadline) throw err;
        await kill().catch(() => undefined);
        await sleep(1_000);
      }
    }
  };

  try {
    await mkdir(binDir);
    if (options.nvidiaHook) {
      const hook = join(binDir, 'nvidia-container-runtime-hook');
      await writeFile(hook, NOOP_HOOK);
      await chmod(hook, 0o755);
    }
    await exec('ip', ['netns', 'add', netns]);
    netnsCreated = true;
    if (options.firewall === true)
      await exec('nsenter', [`--net=/run/netns/${netns}`, 'ip', 'link', 'set', 'lo', 'up']);
    child = await spawnDockerd();
    const docker = new Docker({ socketPath });
    await waitUntilAnswers(docker, child, logPath);
    const main = new Docker();
    for (const image of options.images ?? [PAIR_DRIVER_IMAGE]) await copyImage(main, docker, image);
    const pid = child.pid;
    const recorded = Number((await readFile(join(dir, 'dockerd.pid'), 'utf8')).trim());
    if (pid === undefined || recorded !== pid)
      throw new Error(`second dockerd pid ${recorded} is not the spawned ${pid}`);
    return {
      socketPath,
      get pid(): number {
        return child?.pid ?? pid;
      },
      dataRoot,
      netns,
      stop,
      kill,
      restart,
    };
  } catch (err) {
    await stop().catch(() => undefined);
    throw err;
  }
}
