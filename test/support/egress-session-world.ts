import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { DockerContainerRuntime } from '../../src/adapters/docker/docker-container-runtime.js';
import { DockerPairNetwork, iptablesRunner } from '../../src/adapters/docker/docker-pair-network.js';
import { createEgressGate } from '../../src/adapters/egress/egress-gate.js';
import type { EgressGate } from '../../src/app/ports/egress.js';
import { isAlive, listNetns, startSecondEngine, type SecondEngine } from './second-engine.js';

/**
 * The egress tests' world (issue 42): a throwaway engine with its own firewall in its own namespace, a second
 * namespace playing the internet (HTTP on two addresses, HTTPS, a DNS server answering for the test's names, a log
 * of everything that reached it), the egress gate running its proxy in the engine's namespace.
 */
const exec = promisify(execFile);

export const ALLOWED = '198.18.1.10';
export const OTHER = '198.18.1.11';
export const DNS = '198.18.1.53';
const NAMES = `allowed.test=${ALLOWED},api.anthropic.test=${ALLOWED},evil-anthropic.test=${OTHER},other.test=${OTHER}`;

export interface EgressWorld {
  readonly work: string;
  readonly engine: SecondEngine;
  readonly runtime: DockerContainerRuntime;
  readonly gate: EgressGate;
  readonly upstreamLog: string;
  /** The upstream's log lines so far. */
  upstream(): Promise<string[]>;
  dispose(): Promise<void>;
}

/** `images`: copied into the throwaway engine (default: the pair driver's only). */
export async function startEgressWorld(name: string, images?: readonly string[]): Promise<EgressWorld> {
  const tag = randomUUID().slice(0, 4);
  const outsideNs = `rg-${name}-${tag}`;
  const vethEngine = `rg${name.slice(0, 4)}e${tag}`;
  const vethOutside = `rg${name.slice(0, 4)}o${tag}`;
  const work = await mkdtemp(join(tmpdir(), `rg-${name}-`));
  const children: ChildProcess[] = [];
  let outsideCreated = false;
  let engine: SecondEngine | undefined;
  const proxyPids = async (): Promise<number[]> =>
    [
      ...(await readFile(join(work, 'egress', 'egress-proxy.log'), 'utf8').catch(() => '')).matchAll(
        /^ready (\d+)$/gm,
      ),
    ].map((m) => Number(m[1]));
  const dispose = async (): Promise<void> => {
    for (const pid of await proxyPids()) if (isAlive(pid)) process.kill(pid, 'SIGTERM');
    for (const child of children) if (child.pid !== undefined && isAlive(child.pid)) child.kill('SIGTERM');
    if (engine !== undefined) await engine.stop();
    if (outsideCreated) await exec('ip', ['netns', 'delete', outsideNs]);
    if ((await listNetns()).includes(outsideNs)) throw new Error(`namespace ${outsideNs} left`);
    await rm(work, { recursive: true, force: true });
  };
  try {
    engine = await startSecondEngine({
      nvidiaHook: false,
      name,
      firewall: true,
      ...(images ? { images } : {}),
    });
    const nsenter = [`--net=/run/netns/${engine.netns}`];
    const inEngine = (args: readonly string[]) => exec('nsenter', [...nsenter, ...args]);
    const inOutside = (args: readonly string[]) =>
      exec('nsenter', [`--net=/run/netns/${outsideNs}`, ...args]);
    await exec('ip', ['netns', 'add', outsideNs]);
    outsideCreated = true;
    await inEngine([
      'ip',
      'link',
      'add',
      vethEngine,
      'type',
      'veth',
      'peer',
      'name',
      vethOutside,
      'netns',
      outsideNs,
    ]);
    await inEngine(['ip', 'addr', 'add', '198.18.0.1/30', 'dev', vethEngine]);
    await inEngine(['ip', 'link', 'set', vethEngine, 'up']);
    await inEngine(['ip', 'route', 'add', '198.18.1.0/24', 'via', '198.18.0.2']);
    await inOutside(['ip', 'link', 'set', 'lo', 'up']);
    await inOutside(['ip', 'addr', 'add', '198.18.0.2/30', 'dev', vethOutside]);
    await inOutside(['ip', 'link', 'set', vethOutside, 'up']);
    for (const address of [ALLOWED, OTHER, DNS])
      await inOutside(['ip', 'addr', 'add', `${address}/32`, 'dev', 'lo']);
    await inOutside(['ip', 'route', 'add', 'default', 'via', '198.18.0.1']);
    const [cert, key] = [join(work, 'cert.pem'), join(work, 'key.pem')];
    await exec('openssl', [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      key,
      '-out',
      cert,
      '-days',
      '1',
      '-subj',
      '/CN=allowed.test',
      '-addext',
      'subjectAltName=DNS:allowed.test,DNS:api.anthropic.test',
    ]);
    const upstreamLog = join(work, 'upstream.log');
    const script = join(import.meta.dirname, 'egress-upstream.ts');
    children.push(
      spawn(
        'nsenter',
        [
          `--net=/run/netns/${outsideNs}`,
          process.execPath,
          script,
          upstreamLog,
          cert,
          key,
          DNS,
          NAMES,
          ALLOWED,
          OTHER,
        ],
        { stdio: 'inherit' },
      ),
    );
    for (let i = 0; !(await readFile(upstreamLog, 'utf8').catch(() => '')).includes('ready'); i++) {
      if (i > 100) throw new Error('the upstream servers did not start');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const iptables = iptablesRunner(['nsenter', ...nsenter]);
    const runtime = new DockerContainerRuntime(
      { socketPath: engine.socketPath },
      {
        pairNetwork: new DockerPairNetwork(
          new DockerContainerRuntime({ socketPath: engine.socketPath }).docker,
          iptables,
        ),
      },
    );
    const gate = createEgressGate(runtime.docker, {
      stateDir: join(work, 'egress'),
      iptables,
      commandPrefix: ['nsenter', ...nsenter],
      dns: [DNS],
    });
    return {
      work,
      engine,
      runtime,
      gate,
      upstreamLog,
      upstream: async () => (await readFile(upstreamLog, 'utf8')).split('\n'),
      dispose,
    };
  } catch (err) {
    await dispose().catch(() => undefined);
    throw err;
  }
}
