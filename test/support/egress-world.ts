import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { DockerContainerRuntime } from '../../src/adapters/docker/docker-container-runtime.js';
import {
  DockerPairNetwork,
  iptablesRunner,
  type IptablesRunner,
} from '../../src/adapters/docker/docker-pair-network.js';
import { createEgressGate, type EgressGateOptions } from '../../src/adapters/egress/egress-gate.js';
import type { EgressGate } from '../../src/app/ports/egress.js';
import { runPair } from '../../src/app/pair/run-pair.js';
import type { RunPairOutcome } from '../../src/app/pair/run-pair-types.js';
import { DRIVER_IMAGE, pairRunDeps } from './docker.js';
import { clientHello } from './egress-pair.js';
import { isAlive, listNetns, startSecondEngine, type SecondEngine } from './second-engine.js';

/**
 * The world of the egress tests (issue 42): a throwaway engine with its own firewall in its own network namespace
 * (nothing here touches this machine's rules or the shared pairs network), and a second namespace playing the
 * internet: HTTP and HTTPS servers, a DNS server answering for the test's names, a log of everything that reached
 * them (test/support/egress-upstream.ts).
 */
const exec = promisify(execFile);

export const ALLOWED = '198.18.1.10';
export const OTHER = '198.18.1.11';
export const DNS = '198.18.1.53';
const NAMES =
  `allowed.test=${ALLOWED},api.anthropic.test=${ALLOWED},evil-anthropic.test=${OTHER},other.test=${OTHER}` +
  // Names that answer only AAAA (issue 42): a unique local address and a v4-mapped loopback, both forbidden.
  ',v6only.test=fd00:0:0:0:0:0:0:1,mapped.test=0:0:0:0:0:ffff:7f00:1';
export const POLICY = {
  mode: 'allowlist',
  allow: ['allowed.test', '*.anthropic.test'],
  methods: ['GET', 'HEAD'],
};

export interface EgressWorld {
  readonly tag: string;
  readonly engine: SecondEngine;
  readonly work: string;
  readonly rt: DockerContainerRuntime;
  readonly iptables: IptablesRunner;
  /** `nsenter --net=…` of the engine's namespace. */
  readonly nsenter: readonly string[];
  readonly upstreamLog: string;
  /** A file of the test's: while it exists, no proxy is started (the crash test). */
  readonly stopFlag: string;
  readonly hellos: Readonly<Record<string, Buffer>>;
  /** The options of an egress gate of this world (each gate is one client process's broker). */
  readonly gateOptions: EgressGateOptions;
  readonly gate: EgressGate;
  inEngineNs(args: readonly string[]): Promise<{ stdout: string; stderr: string }>;
  /** The pids of the proxies started so far (their `ready` lines), oldest first. */
  proxyPids(): Promise<number[]>;
  pair(
    jobId: string,
    script: string,
    egress: unknown,
    options?: { files?: Record<string, Buffer>; gate?: EgressGate; secret?: string },
  ): Promise<RunPairOutcome & { dir: string; cwd: string }>;
  /** The spec `pair` runs (a child process runs it too: the supervisor-restart test). */
  spec(jobId: string, script: string, egress: unknown): Record<string, unknown>;
  stop(): Promise<void>;
}

export async function startEgressWorld(name: string): Promise<EgressWorld> {
  const tag = randomUUID().slice(0, 6);
  const outsideNs = `rg-${name}-${tag}`;
  const vethEngine = `rg${name}e${tag.slice(0, 4)}`.slice(0, 15);
  const vethOutside = `rg${name}o${tag.slice(0, 4)}`.slice(0, 15);
  const work = await mkdtemp(join(tmpdir(), `rg-${name}-`));
  const children: ChildProcess[] = [];
  const engine = await startSecondEngine({ nvidiaHook: false, name, firewall: true });
  const nsenter = [`--net=/run/netns/${engine.netns}`];
  const inEngineNs = (args: readonly string[]) => exec('nsenter', [...nsenter, ...args]);
  const inOutsideNs = (args: readonly string[]) =>
    exec('nsenter', [`--net=/run/netns/${outsideNs}`, ...args]);
  let outsideCreated = false;
  const proxyPids = async (): Promise<number[]> =>
    [
      ...(await readFile(join(work, 'egress', 'egress-proxy.log'), 'utf8').catch(() => '')).matchAll(
        /^ready (\d+)$/gm,
      ),
    ].map((m) => Number(m[1]));
  const stop = async () => {
    for (const pid of await proxyPids()) if (isAlive(pid)) process.kill(pid, 'SIGTERM');
    for (const child of children) if (child.pid !== undefined && isAlive(child.pid)) child.kill('SIGTERM');
    await engine.stop();
    if (outsideCreated) await exec('ip', ['netns', 'delete', outsideNs]);
    if ((await listNetns()).includes(outsideNs)) throw new Error(`namespace ${outsideNs} is left`);
    if (process.env['EG42_KEEP'] !== '1') await rm(work, { recursive: true, force: true });
  };
  try {
    await exec('ip', ['netns', 'add', outsideNs]);
    outsideCreated = true;
    await inEngineNs([
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
    await inEngineNs(['ip', 'addr', 'add', '198.18.0.1/30', 'dev', vethEngine]);
    await inEngineNs(['ip', 'link', 'set', vethEngine, 'up']);
    await inEngineNs(['ip', 'route', 'add', '198.18.1.0/24', 'via', '198.18.0.2']);
    await inOutsideNs(['ip', 'link', 'set', 'lo', 'up']);
    await inOutsideNs(['ip', 'addr', 'add', '198.18.0.2/30', 'dev', vethOutside]);
    await inOutsideNs(['ip', 'link', 'set', vethOutside, 'up']);
    for (const address of [ALLOWED, OTHER, DNS])
      await inOutsideNs(['ip', 'addr', 'add', `${address}/32`, 'dev', 'lo']);
    await inOutsideNs(['ip', 'route', 'add', 'default', 'via', '198.18.0.1']);
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
    const hellos: Record<string, Buffer> = {};
    for (const host of ['allowed.test', 'api.anthropic.test', 'other.test'])
      hellos[host] = await clientHello(host);
    const iptables = iptablesRunner(['nsenter', ...nsenter]);
    const rt = new DockerContainerRuntime(
      { socketPath: engine.socketPath },
      {
        pairNetwork: new DockerPairNetwork(
          new DockerContainerRuntime({ socketPath: engine.socketPath }).docker,
          iptables,
        ),
      },
    );
    const stopFlag = join(work, 'no-proxy');
    const gateOptions: EgressGateOptions = {
      stateDir: join(work, 'egress'),
      iptables,
      commandPrefix: ['sh', '-c', 'test -e "$0" && exit 3; exec "$@"', stopFlag, 'nsenter', ...nsenter],
      dns: [DNS],
    };
    const gate = createEgressGate(rt.docker, gateOptions);
    const spec = (jobId: string, script: string, egress: unknown) => {
      const dir = join(work, jobId);
      const cwd = join(dir, 'cwd');
      return {
        job_id: jobId,
        argv: [
          '/bin/sh',
          '-c',
          `${script}\necho '{"job_id":"${jobId}","infrastructure_failure":false,"fatal_failure":false,"arms":{}}' > "$ROBOGUIDE_OUTCOME_PATH"`,
        ],
        cwd,
        outcome_path: join(dir, 'out', 'outcome.json'),
        environment: { API_TOKEN: '${API_TOKEN}' },
        timeout_seconds: 180,
        image: DRIVER_IMAGE,
        ...(egress !== undefined ? { egress } : {}),
      };
    };
    const pair: EgressWorld['pair'] = async (jobId, script, egress, options = {}) => {
      const dir = join(work, jobId);
      const cwd = join(dir, 'cwd');
      await mkdir(cwd, { recursive: true });
      for (const [file, bytes] of Object.entries(options.files ?? {}))
        await writeFile(join(cwd, file), bytes);
      const outcome = await runPair(
        { ...pairRunDeps(rt), egress: options.gate ?? gate },
        {
          specText: JSON.stringify(spec(jobId, script, egress)),
          specSource: `${jobId}.json`,
          output: join(dir, 'evidence'),
          bindAddress: '0.0.0.0',
          environment: { API_TOKEN: options.secret ?? 'no-secret-given' },
          codeVersion: 'test',
          cwd: work,
        },
      );
      return { ...outcome, dir, cwd };
    };
    return {
      tag,
      engine,
      work,
      rt,
      iptables,
      nsenter,
      upstreamLog,
      stopFlag,
      hellos,
      gateOptions,
      gate,
      inEngineNs,
      proxyPids,
      pair,
      spec,
      stop,
    };
  } catch (err) {
    await stop().catch(() => undefined);
    throw err;
  }
}
