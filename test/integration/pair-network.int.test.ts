import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DockerContainerRuntime } from '../../src/adapters/docker/docker-container-runtime.js';
import { DockerPairNetwork, iptablesRunner } from '../../src/adapters/docker/docker-pair-network.js';
import { DockerSessionEngine } from '../../src/adapters/docker/docker-session-engine.js';
import { createDoctorDeps } from '../../src/adapters/doctor-probes.js';
import { runDoctor } from '../../src/app/doctor/run-doctor.js';
import { runPair } from '../../src/app/pair/run-pair.js';
import type { RunPairOutcome } from '../../src/app/pair/run-pair-types.js';
import { PAIRS_BRIDGE, PAIRS_CHAIN, PAIRS_NETWORK } from '../../src/core/pair-network.js';
import { gatherBatchHostFacts } from '../../src/composition-root.js';
import { BIN_RUN_JS } from '../../src/package-root.js';
import { DRIVER_IMAGE, noDocker, pairRunDeps } from '../support/docker.js';
import {
  isAlive,
  listNetns,
  namespaceSupportProblem,
  startSecondEngine,
  type SecondEngine,
} from '../support/second-engine.js';

/**
 * The guarded pairs network on a throwaway engine with its own firewall, in its own network namespace: nothing here
 * touches this machine's root namespace (its rules, its interfaces, its engine). Around it, a second namespace plays
 * "the outside": reached through a veth, it holds the cloud metadata address 169.254.169.254 and an allowed server
 * (203.0.113.2, TEST-NET-3), each with a busybox httpd. The engine's namespace plays the host: an httpd on its own
 * addresses. Every probe is checked against a control that reaches the same address, so a probe cannot fail for
 * another reason than the guard.
 */

const exec = promisify(execFile);
const required = process.env['REQUIRE_DOCKER'] === '1';
const namespaceProblem = noDocker ? 'no Docker engine' : await namespaceSupportProblem();
const skip = namespaceProblem !== null && !required;
if (skip) console.warn(`\n*** pair-network on a throwaway engine SKIPPED: ${namespaceProblem} ***\n`);

const tag = randomUUID().slice(0, 6);
const OUTSIDE_NS = `rg-w22out-${tag}`;
const VETH_ENGINE = `rgw22e${tag.slice(0, 4)}`;
const VETH_OUTSIDE = `rgw22o${tag.slice(0, 4)}`;
const HOST_ADDRESS = '203.0.113.1';
const ALLOWED_ADDRESS = '203.0.113.2';
const METADATA_ADDRESS = '169.254.169.254';
const PAIR_PORT = 9000;

/**
 * An HTTP GET of each `host:port` from inside a container, with busybox `nc` (its static `wget` crashes on this
 * image): one line per target, `host:port ok` when a 200 came back, else `host:port fail`.
 */
function probeScript(targets: readonly string[]): string {
  return targets
    .map((t) => {
      const [host, port] = t.split(':');
      return `r=$(printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 ${host} ${port} 2>/dev/null); case "$r" in *" 200 "*) echo "${t} ok";; *) echo "${t} fail";; esac`;
    })
    .join('; ');
}

function parseProbes(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const [url, verdict] = line.split(' ');
    if (url !== undefined && verdict !== undefined) out[url] = verdict;
  }
  return out;
}

/** The stdout frames of a non-TTY container's log (8-byte headers: stream, 3 zero bytes, big-endian length). */
function stdoutOf(raw: Buffer): string {
  const parts: Buffer[] = [];
  for (let offset = 0; offset + 8 <= raw.length;) {
    const size = raw.readUInt32BE(offset + 4);
    if (raw[offset] === 1) parts.push(raw.subarray(offset + 8, offset + 8 + size));
    offset += 8 + size;
  }
  return Buffer.concat(parts).toString('utf8');
}

describe.skipIf(skip)('the guarded pairs network on a throwaway engine with its own firewall', () => {
  let engine: SecondEngine | undefined;
  let work: string;
  let rt: DockerContainerRuntime;
  let guard: DockerPairNetwork;
  let nsenter: string[];
  const listeners: ChildProcess[] = [];
  let outsideCreated = false;

  const inEngineNs = (args: readonly string[]) => exec('nsenter', [...nsenter, ...args]);
  const inOutsideNs = (args: readonly string[]) =>
    exec('nsenter', [`--net=/run/netns/${OUTSIDE_NS}`, ...args]);

  async function httpd(ns: string, dir: string, text: string): Promise<void> {
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, 'index.html'), text);
    const child = spawn(
      'nsenter',
      [`--net=/run/netns/${ns}`, 'busybox', 'httpd', '-f', '-p', '80', '-h', dir],
      { stdio: 'ignore' },
    );
    listeners.push(child);
  }

  beforeAll(async () => {
    if (namespaceProblem !== null)
      throw new Error(`REQUIRE_DOCKER=1 but a second engine cannot be started: ${namespaceProblem}`);
    work = await mkdtemp(join(tmpdir(), 'rg-w22net-'));
    engine = await startSecondEngine({ nvidiaHook: false, name: 'w22net', firewall: true });
    nsenter = [`--net=/run/netns/${engine.netns}`];
    // The outside: its own namespace, a veth to the engine's, the metadata address on its loopback.
    await exec('ip', ['netns', 'add', OUTSIDE_NS]);
    outsideCreated = true;
    await inEngineNs([
      'ip',
      'link',
      'add',
      VETH_ENGINE,
      'type',
      'veth',
      'peer',
      'name',
      VETH_OUTSIDE,
      'netns',
      OUTSIDE_NS,
    ]);
    await inEngineNs(['ip', 'addr', 'add', `${HOST_ADDRESS}/24`, 'dev', VETH_ENGINE]);
    await inEngineNs(['ip', 'link', 'set', VETH_ENGINE, 'up']);
    await inEngineNs(['ip', 'route', 'add', 'default', 'via', ALLOWED_ADDRESS]);
    await inOutsideNs(['ip', 'link', 'set', 'lo', 'up']);
    await inOutsideNs(['ip', 'addr', 'add', `${ALLOWED_ADDRESS}/24`, 'dev', VETH_OUTSIDE]);
    await inOutsideNs(['ip', 'link', 'set', VETH_OUTSIDE, 'up']);
    // No dummy interfaces in this kernel: the metadata address sits on the outside's loopback.
    await inOutsideNs(['ip', 'addr', 'add', `${METADATA_ADDRESS}/32`, 'dev', 'lo']);
    await httpd(OUTSIDE_NS, join(work, 'www-outside'), 'outside');
    await httpd(engine.netns, join(work, 'www-host'), 'host');
    guard = new DockerPairNetwork(
      new DockerContainerRuntime({ socketPath: engine.socketPath }).docker,
      iptablesRunner(['nsenter', ...nsenter]),
    );
    rt = new DockerContainerRuntime({ socketPath: engine.socketPath }, { pairNetwork: guard });
    // The listeners answer (from the engine's namespace: the host reaches everything).
    for (let i = 0; ; i++) {
      const ok = await Promise.all(
        [`http://${ALLOWED_ADDRESS}/`, `http://${METADATA_ADDRESS}/`, `http://${HOST_ADDRESS}/`].map((url) =>
          inEngineNs(['curl', '-sf', '-m', '2', url]).then(
            () => true,
            () => false,
          ),
        ),
      );
      if (ok.every(Boolean)) break;
      if (i > 50) throw new Error('the test listeners did not come up');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  });

  afterAll(async () => {
    for (const child of listeners) if (child.pid !== undefined && isAlive(child.pid)) child.kill('SIGTERM');
    if (engine !== undefined) {
      await engine.stop();
      expect(await listNetns()).not.toContain(engine.netns);
    }
    if (outsideCreated) await exec('ip', ['netns', 'delete', OUTSIDE_NS]);
    expect(await listNetns()).not.toContain(OUTSIDE_NS);
    if (work !== undefined) await rm(work, { recursive: true, force: true });
  });

  async function pair(
    jobId: string,
    script: string,
    options: {
      ports?: number[];
      env?: Record<string, string>;
      terminate?: AbortSignal;
      network?: string;
    } = {},
  ): Promise<RunPairOutcome> {
    const outcome = join(work, jobId, 'out', 'outcome.json');
    const spec = {
      job_id: jobId,
      argv: [
        '/bin/sh',
        '-c',
        `${script}; echo '{"job_id":"${jobId}","infrastructure_failure":false,"fatal_failure":false,"arms":{}}' > "$ROBOGUIDE_OUTCOME_PATH"`,
      ],
      cwd: join(work, jobId, 'cwd'),
      outcome_path: outcome,
      environment: options.env ?? {},
      ports: options.ports ?? [],
      timeout_seconds: 120,
      image: DRIVER_IMAGE,
      ...(options.network !== undefined ? { network: options.network } : {}),
    };
    await mkdir(spec.cwd, { recursive: true });
    return runPair(pairRunDeps(rt), {
      specText: JSON.stringify(spec),
      specSource: `${jobId}.json`,
      output: join(work, jobId, 'evidence'),
      bindAddress: '0.0.0.0',
      environment: {},
      codeVersion: 'test',
      cwd: work,
      ...(options.terminate ? { terminate: options.terminate } : {}),
    });
  }

  async function iptablesListing(family: 'iptables' | 'ip6tables', chain: string): Promise<string> {
    return (
      await inEngineNs([family, '-w', '-S', chain]).catch((err: { stdout?: string }) => ({
        stdout: `missing ${err.stdout ?? ''}`,
      }))
    ).stdout;
  }

  it('doctor warns before the first pair: nothing is set up yet', async () => {
    const report = await runDoctor(
      { ...createDoctorDeps(rt, gatherBatchHostFacts), pairNetwork: guard },
      {
        images: [DRIVER_IMAGE],
        probeGpu: false,
        registryPath: null,
        defaultRegistryPath: join(work, 'registry.db'),
        outputDir: work,
      },
    );
    const check = report.checks.find((c) => c.name === 'pairs network');
    expect(check).toMatchObject({ status: 'warn' });
    expect(check?.detail).toContain('not created yet');
  });

  it('a pair reaches the allowed outside address but neither the metadata address, the host, nor another pair (its container or its published port); the published port still works from the host', async () => {
    const listenerJob = `w22-listener-${tag}`;
    const stop = new AbortController();
    const listener = pair(
      listenerJob,
      `mkdir -p /tmp/w && echo pair-b > /tmp/w/index.html && exec httpd -f -p ${PAIR_PORT} -h /tmp/w`,
      { ports: [PAIR_PORT], terminate: stop.signal },
    );
    listener.catch(() => undefined);
    try {
      // The listener runs on our network: its address there, and the network's gateway (a host address).
      let listenerIp = '';
      let gateway = '';
      for (let i = 0; listenerIp === ''; i++) {
        const [c] = (await rt.docker.listContainers({
          filters: { label: [`roboguide.job=${listenerJob}`], status: ['running'] },
        })) as { NetworkSettings: { Networks: Record<string, { IPAddress: string; Gateway: string }> } }[];
        const net = c?.NetworkSettings.Networks[PAIRS_NETWORK];
        if (net !== undefined && net.IPAddress !== '') [listenerIp, gateway] = [net.IPAddress, net.Gateway];
        else if (i > 100) throw new Error('the listener pair did not start on the pairs network');
        else await new Promise((resolve) => setTimeout(resolve, 100));
      }
      // Controls: the listener answers on its address and on the published port, from the host.
      const fromHost = async (url: string) => (await inEngineNs(['curl', '-sf', '-m', '3', url])).stdout;
      for (let i = 0; ; i++) {
        if ((await fromHost(`http://${listenerIp}:${PAIR_PORT}/`).catch(() => '')).includes('pair-b')) break;
        if (i > 50) throw new Error('the listener pair does not answer');
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(await fromHost(`http://127.0.0.1:${PAIR_PORT}/`)).toContain('pair-b');

      const urls = {
        allowed: `${ALLOWED_ADDRESS}:80`,
        metadata: `${METADATA_ADDRESS}:80`,
        hostAddress: `${HOST_ADDRESS}:80`,
        gateway: `${gateway}:80`,
        otherPair: `${listenerIp}:${PAIR_PORT}`,
        otherPairPublished: `${HOST_ADDRESS}:${PAIR_PORT}`,
      };
      const probe = await pair(`w22-probe-${tag}`, probeScript(Object.values(urls)));
      expect(probe.result.classification).toBe('completed');
      expect(probe.receipt.network).toEqual({ choice: 'bridge', engine_network: PAIRS_NETWORK });
      const seen = parseProbes(await readFile(join(probe.output, 'stdout.log'), 'utf8'));
      expect(seen).toEqual({
        [urls.allowed]: 'ok',
        [urls.metadata]: 'fail',
        [urls.hostAddress]: 'fail',
        [urls.gateway]: 'fail',
        [urls.otherPair]: 'fail',
        [urls.otherPairPublished]: 'fail',
      });

      // Control: the same probes from a container on the engine's default bridge (no rules of ours) reach the
      // metadata address and the host: the failures above are the guard's.
      const control = await rt.docker.createContainer({
        Image: DRIVER_IMAGE,
        Cmd: ['/bin/sh', '-c', probeScript([urls.allowed, urls.metadata, urls.hostAddress])],
        HostConfig: { NetworkMode: 'bridge' },
        Labels: { 'it.w22net': tag },
      });
      try {
        await control.start();
        await control.wait();
        const logs = stdoutOf(await control.logs({ stdout: true, stderr: false }));
        expect(parseProbes(logs)).toEqual({
          [urls.allowed]: 'ok',
          [urls.metadata]: 'ok',
          [urls.hostAddress]: 'ok',
        });
      } finally {
        await control.remove({ force: true });
      }
    } finally {
      stop.abort();
      const done = await listener;
      expect(done.result.cleanup).toMatchObject({ removed: true, verified_absent: true });
    }
  });

  it('a guard that cannot be set up fails the pair closed: no container was created', async () => {
    const broken = new DockerPairNetwork(rt.docker, () =>
      Promise.resolve({
        code: 4,
        stdout: '',
        stderr: 'Permission denied (you must be root)',
      }),
    );
    const unguarded = new DockerContainerRuntime(
      { socketPath: engine?.socketPath ?? '' },
      { pairNetwork: broken },
    );
    const jobId = `w22-closed-${tag}`;
    const outcome = join(work, jobId, 'out', 'outcome.json');
    await mkdir(join(work, jobId, 'cwd'), { recursive: true });
    const { result } = await runPair(pairRunDeps(unguarded), {
      specText: JSON.stringify({
        job_id: jobId,
        argv: ['/bin/true'],
        cwd: join(work, jobId, 'cwd'),
        outcome_path: outcome,
        image: DRIVER_IMAGE,
      }),
      specSource: `${jobId}.json`,
      output: join(work, jobId, 'evidence'),
      bindAddress: '127.0.0.1',
      environment: {},
      codeVersion: 'test',
      cwd: work,
    });
    expect(result.classification).toBe('infrastructure_failure');
    expect(result.container.id).toBeNull();
    expect(result.engine_error?.message).toContain('Permission denied');
    expect(await rt.listByLabel({ 'roboguide.job': jobId })).toEqual([]);
  });

  it('a serve session on network "bridge" joins the guarded network too', async () => {
    const sessions = new DockerSessionEngine(rt);
    const { id } = await sessions.createAndStart({
      name: `w22-session-${tag}`,
      image: DRIVER_IMAGE,
      env: {},
      workdir: undefined,
      binds: [],
      ports: [],
      bindAddress: '127.0.0.1',
      network: 'bridge',
      nanoCpus: undefined,
      memoryBytes: undefined,
      deviceRequests: [],
      labels: { 'it.w22net': tag },
      stopTimeoutSec: 1,
    });
    try {
      const inspected = await rt.docker.getContainer(id).inspect();
      expect(inspected.HostConfig.NetworkMode).toBe(PAIRS_NETWORK);
      expect(Object.keys(inspected.NetworkSettings.Networks)).toEqual([PAIRS_NETWORK]);
    } finally {
      await rt.docker.getContainer(id).remove({ force: true });
    }
    expect(await rt.inspect(id)).toBeNull();
  });

  it('network "none": the pair has loopback only', async () => {
    const probe = await pair(`w22-none-${tag}`, probeScript([`${ALLOWED_ADDRESS}:80`]), { network: 'none' });
    expect(probe.result.classification).toBe('completed');
    expect(probe.receipt.network).toEqual({ choice: 'none', engine_network: 'none' });
    expect(parseProbes(await readFile(join(probe.output, 'stdout.log'), 'utf8'))).toEqual({
      [`${ALLOWED_ADDRESS}:80`]: 'fail',
    });
  });

  it('doctor reports the network (ICC off) and the rules; a rule removed by hand fails it; the next pair restores it', async () => {
    const doctor = async () =>
      (
        await runDoctor(
          { ...createDoctorDeps(rt, gatherBatchHostFacts), pairNetwork: guard },
          {
            images: [DRIVER_IMAGE],
            probeGpu: false,
            registryPath: null,
            defaultRegistryPath: join(work, 'registry.db'),
            outputDir: work,
          },
        )
      ).checks.find((c) => c.name === 'pairs network');
    expect(await doctor()).toMatchObject({ status: 'ok' });
    expect((await doctor())?.detail).toContain('ICC off');
    const inspected = (await rt.docker.getNetwork(PAIRS_NETWORK).inspect()) as {
      Options: Record<string, string>;
      Labels: Record<string, string>;
    };
    expect(inspected.Options).toMatchObject({
      'com.docker.network.bridge.enable_icc': 'false',
      'com.docker.network.bridge.name': PAIRS_BRIDGE,
    });
    expect(inspected.Labels).toMatchObject({ 'roboguide.network': 'pairs' });
    expect(await iptablesListing('iptables', 'INPUT')).toContain(
      `-A INPUT -i ${PAIRS_BRIDGE} -j ${PAIRS_CHAIN}`,
    );
    expect(await iptablesListing('iptables', 'DOCKER-USER')).toContain(
      `-A DOCKER-USER -i ${PAIRS_BRIDGE} -j ${PAIRS_CHAIN}`,
    );
    expect(await iptablesListing('ip6tables', 'INPUT')).toContain(
      `-A INPUT -i ${PAIRS_BRIDGE} -j ${PAIRS_CHAIN}`,
    );

    await inEngineNs(['iptables', '-w', '-D', 'DOCKER-USER', '-i', PAIRS_BRIDGE, '-j', PAIRS_CHAIN]);
    const broken = await doctor();
    expect(broken).toMatchObject({ status: 'fail' });
    expect(broken?.detail).toContain('the jump from DOCKER-USER');

    const again = await pair(`w22-restore-${tag}`, 'true');
    expect(again.result.classification).toBe('completed');
    expect(await doctor()).toMatchObject({ status: 'ok' });
  });

  it("`network remove` (the CLI, in the engine's namespace) removes the network and every rule of ours, idempotently", async () => {
    const { stdout } = await exec(
      'nsenter',
      [...nsenter, process.execPath, BIN_RUN_JS, 'network', 'remove', '--json'],
      {
        env: {
          ...process.env,
          DOCKER_HOST: `unix://${engine?.socketPath ?? ''}`,
          ROBOGUIDE_PAIRS_NETWORK: '',
        },
      },
    );
    expect(JSON.parse(stdout)).toEqual({ network: 'removed', rules: 'removed' });
    await expect(rt.docker.getNetwork(PAIRS_NETWORK).inspect()).rejects.toMatchObject({ statusCode: 404 });
    for (const family of ['iptables', 'ip6tables'] as const) {
      expect(await iptablesListing(family, PAIRS_CHAIN)).toMatch(/^missing/);
      expect(await iptablesListing(family, 'INPUT')).not.toContain(PAIRS_CHAIN);
    }
    expect(await iptablesListing('iptables', 'DOCKER-USER')).not.toContain(PAIRS_CHAIN);
    expect(await guard.check()).toEqual({
      network: { state: 'missing' },
      rules: [
        {
          family: 'ipv4',
          ok: false,
          missing: [`chain ${PAIRS_CHAIN}`, 'the jump from INPUT', 'the jump from DOCKER-USER'],
        },
        { family: 'ipv6', ok: false, missing: [`chain ${PAIRS_CHAIN}`, 'the jump from INPUT'] },
      ],
    });
    // Idempotent.
    expect(await guard.remove()).toEqual({ network: 'absent', rules: 'absent' });
  });
});
