import { spawn } from 'node:child_process';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rulesetWatchFor, type IptablesRunner } from '../../src/adapters/docker/docker-pair-network.js';
import { DockerEgressNetwork } from '../../src/adapters/egress/docker-egress-network.js';
import { createEgressGate } from '../../src/adapters/egress/egress-gate.js';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { executePair } from '../../src/app/pair/execute-pair.js';
import { summarize } from '../../src/core/egress/record.js';
import { DEFAULT_PROXY_PORT, DEFAULT_SINK_PORT } from '../../src/core/egress/egress-network.js';
import { DEFAULT_SESSIONS_DIR } from '../../src/core/manifest/constants.js';
import { noDocker, pairRunDeps } from '../support/docker.js';
import { egressRecords, HELPERS } from '../support/egress-pair.js';
import { ALLOWED, DNS, POLICY, startEgressWorld, type EgressWorld } from '../support/egress-world.js';
import { isAlive, namespaceSupportProblem } from '../support/second-engine.js';

/**
 * Egress across restarts (issue 42, "Works at scale"): a supervisor killed mid-pair, the proxy crashing, the engine
 * restarting, a rule removed between two pairs; and the proxy's IPv6 answers. On a throwaway engine (its own
 * firewall, its own namespace), with the internet of test/support/egress-world.ts.
 */
const required = process.env['REQUIRE_DOCKER'] === '1';
const namespaceProblem = noDocker ? 'no Docker engine' : await namespaceSupportProblem();
const skip = namespaceProblem !== null && !required;
if (skip) console.warn(`\n*** egress restarts on a throwaway engine SKIPPED: ${namespaceProblem} ***\n`);

const SECRET = `sk-egress-r-${Math.random().toString(36).slice(2)}`;
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const exists = (path: string) =>
  readFile(path).then(
    () => true,
    () => false,
  );
async function until(what: string, check: () => Promise<boolean>, ms = 60_000): Promise<void> {
  for (const end = Date.now() + ms; !(await check()); await pause(100))
    if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms`);
}
/** The pair waits for a file of the test's in its cwd. */
const waitFor = (name: string) => `for i in $(seq 1 900); do [ -e ${name} ] && break; sleep 0.2; done`;
/** A request tried until it went through (or 40 times): the proxy may be on its way back. */
const retried = (name: string, url: string) =>
  `for i in $(seq 1 40); do req ${name} "GET ${url}" allowed.test; grep -q upstream out-${name} && break; sleep 0.5; done`;

describe.skipIf(skip)('egress across restarts, and IPv6, on a throwaway engine', () => {
  let world: EgressWorld;

  beforeAll(async () => {
    if (namespaceProblem !== null)
      throw new Error(`REQUIRE_DOCKER=1 but a second engine cannot be started: ${namespaceProblem}`);
    world = await startEgressWorld('egr');
  });

  afterAll(async () => {
    await world?.stop();
  });

  const out = (cwd: string, name: string) => readFile(join(cwd, `out-${name}`), 'utf8').catch(() => '');

  it('a supervisor killed mid-pair: egress.jsonl keeps every attempt so far; the reattached pair is registered again (its token, its policy) and the attempts made meanwhile are in it too', async () => {
    const jobId = `egr-super-${world.tag}`;
    const dir = join(world.work, jobId);
    const cwd = join(dir, 'cwd');
    await mkdir(cwd, { recursive: true });
    const script = [
      HELPERS,
      `req before "GET http://allowed.test/before?key=$API_TOKEN" allowed.test`,
      'touch phase1',
      waitFor('go1'),
      `req orphaned "GET http://allowed.test/orphaned" allowed.test`,
      'touch phase2',
      waitFor('go2'),
      retried('after', 'http://allowed.test/after'),
      `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | timeout 6 nc -w 3 ${ALLOWED} 81 > out-raw 2>&1`,
      'true',
    ].join('\n');
    const spec = world.spec(jobId, script, POLICY);
    const evidence = join(dir, 'evidence');
    const child = spawn(
      process.execPath,
      [
        join(import.meta.dirname, '..', 'support', 'egress-supervisor.mjs'),
        JSON.stringify({
          socketPath: world.engine.socketPath,
          nsenter: world.nsenter,
          gateOptions: { ...world.gateOptions, iptables: undefined },
          spec,
          output: evidence,
          secret: SECRET,
          registry: join(dir, 'registry.db'),
          cwd: world.work,
        }),
      ],
      { stdio: 'inherit' },
    );
    const file = join(evidence, 'egress.jsonl');
    try {
      await until('the first attempt recorded while the pair runs', async () =>
        (await readFile(file, 'utf8').catch(() => '')).includes('/before'),
      );
      await until('the first phase over', () => exists(join(cwd, 'phase1')));
    } finally {
      child.kill('SIGKILL');
    }
    await until('the supervisor gone', () =>
      Promise.resolve(child.exitCode !== null || child.signalCode !== null),
    );
    const kept = await egressRecords(dir);
    expect(kept.find((r) => r.target?.includes('/before'))).toMatchObject({
      decision: 'allowed',
      status: 200,
    });
    // No supervisor: the pair is refused everything (fail closed).
    await writeFile(join(cwd, 'go1'), '');
    await until('the pair tried while no supervisor held it', () => exists(join(cwd, 'phase2')));
    expect(await out(cwd, 'orphaned')).toMatch(/^HTTP\/1\.1 407/);
    // A new supervisor (a new client of the proxy) reattaches the pair, as the batch's recover path does.
    const receipt = JSON.parse(await readFile(join(evidence, 'receipt.json'), 'utf8')) as {
      batch_id: string;
      claim_id: string;
      claimed_at: string;
      container_id: string;
    };
    const deps = { ...pairRunDeps(world.rt), egress: createEgressGate(world.rt.docker, world.gateOptions) };
    const claimedAtMs = Date.parse(receipt.claimed_at);
    const running = executePair(deps, {
      store: new EvidenceStore(new NodeFileSystem(), evidence),
      jobRel: '.',
      batchId: receipt.batch_id,
      claimId: receipt.claim_id,
      job: { ...(spec as unknown as Parameters<typeof executePair>[1]['job']), ports: [] },
      environment: { API_TOKEN: SECRET },
      secrets: [SECRET],
      sessionsDir: DEFAULT_SESSIONS_DIR,
      stopBudgetSec: 5,
      bindAddress: '0.0.0.0',
      allowedHttpStatuses: [],
      deadlineMs: claimedAtMs + 180_000,
      readOutcome: (path) => deps.outcomes.read(path),
      reattach: { containerId: receipt.container_id, claimedAtMs },
    });
    await writeFile(join(cwd, 'go2'), '');
    const { result } = await running;
    expect(await out(cwd, 'after')).toContain(`upstream ${ALLOWED} GET allowed.test`);
    const records = await egressRecords(dir);
    expect(records.find((r) => r.target?.includes('/before'))).toMatchObject({ decision: 'allowed' });
    expect(records.find((r) => r.target?.includes('/orphaned'))).toMatchObject({
      decision: 'refused',
      reason: 'unknown_client',
    });
    expect(records.find((r) => r.target?.includes('/after') && r.decision === 'allowed')).toBeDefined();
    expect(records.find((r) => r.via === 'tcp' && r.port === 81)).toMatchObject({
      decision: 'refused',
      reason: 'not_through_proxy',
    });
    // The summary is the file's; nothing secret in it (the token of the reattached pair included).
    expect(result.egress).toEqual(summarize('allowlist', records));
    const text = await readFile(file, 'utf8');
    expect(text).not.toContain(SECRET);
    expect(result.cleanup).toMatchObject({ removed: true, verified_absent: true });
  });

  it('the proxy crashing under a running pair: refused while it is down (even when it cannot start at once), started again, the pair registered again and allowed', async () => {
    const jobId = `egr-crash-${world.tag}`;
    const cwd = join(world.work, jobId, 'cwd');
    const running = world.pair(
      jobId,
      [
        HELPERS,
        `req first "GET http://allowed.test/first" allowed.test`,
        'touch started',
        waitFor('go-down'),
        `req down "GET http://allowed.test/down" allowed.test`,
        `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | timeout 6 nc -w 3 ${ALLOWED} 80 > out-raw-down 2>&1`,
        'touch tried',
        waitFor('go-up'),
        retried('back', 'http://allowed.test/back'),
        'true',
      ].join('\n'),
      POLICY,
      { secret: SECRET },
    );
    await until('the pair started', () => exists(join(cwd, 'started')));
    expect(await out(cwd, 'first')).toContain('upstream');
    // Killed while it cannot be started again (the flag): the client's first restart fails.
    await writeFile(world.stopFlag, '');
    const before = await world.proxyPids();
    for (const pid of before.filter(isAlive)) process.kill(pid, 'SIGKILL');
    await until('the proxy dead', () => Promise.resolve(!before.some(isAlive)));
    await writeFile(join(cwd, 'go-down'), '');
    await until('the pair tried while the proxy was down', () => exists(join(cwd, 'tried')));
    expect(await out(cwd, 'down')).not.toContain('upstream');
    expect(await out(cwd, 'raw-down')).not.toContain('upstream');
    // The client's first restart gives up after its deadline (15 s); it must try again on its own.
    await pause(16_000);
    await rm(world.stopFlag, { force: true });
    await until(
      'a new proxy',
      async () => (await world.proxyPids()).filter((p) => !before.includes(p)).some(isAlive),
      30_000,
    );
    await writeFile(join(cwd, 'go-up'), '');
    const { result, dir } = await running;
    expect(await out(cwd, 'back')).toContain(`upstream ${ALLOWED} GET allowed.test`);
    const records = await egressRecords(dir);
    expect(records.find((r) => r.target?.includes('/back') && r.decision === 'allowed')).toBeDefined();
    expect(records.find((r) => r.target?.includes('/down') && r.decision === 'allowed')).toBeUndefined();
    expect(result.cleanup).toMatchObject({ removed: true, verified_absent: true });
  });

  it('IPv6: an allowed name answering only AAAA with a unique local or a v4-mapped loopback address is refused (forbidden_address); a direct IPv6 connection has no route out of the pair', async () => {
    const jobId = `egr-v6-${world.tag}`;
    const { result, cwd, dir } = await world.pair(
      jobId,
      [
        HELPERS,
        `req ula "GET http://v6only.test/" v6only.test`,
        `req mapped "GET http://mapped.test/" mapped.test`,
        'timeout 6 nc -w 3 2001:db8::10 80 < /dev/null > out-v6-direct 2>&1; echo "exit $?" >> out-v6-direct',
        'cat /proc/net/ipv6_route > out-v6-routes 2>&1; cat /proc/net/if_inet6 > out-v6-addresses 2>&1',
        'true',
      ].join('\n'),
      { mode: 'allowlist', allow: ['v6only.test', 'mapped.test'] },
      { secret: SECRET },
    );
    expect(result.classification).toBe('completed');
    for (const name of ['ula', 'mapped']) expect(await out(cwd, name), name).toMatch(/^HTTP\/1\.1 403/);
    const records = await egressRecords(dir);
    for (const host of ['v6only.test', 'mapped.test'])
      expect(records.find((r) => r.host === host)).toMatchObject({
        decision: 'refused',
        reason: 'forbidden_address',
      });
    // No IPv6 route leaves the pair: the egress network has no IPv6 (docs/spec.md §5.6); only loopback and
    // link-local addresses, no route but link-local ones, and the connection fails inside the container.
    const direct = await out(cwd, 'v6-direct');
    expect(direct).not.toMatch(/exit 0/);
    // /proc/net/ipv6_route: destination, prefix, …, device. Every route is link-local, multicast, or on loopback
    // (the kernel's own: ::1, and the reject route ::/0 lo that answers "network unreachable").
    const routes = (await out(cwd, 'v6-routes')).split('\n').filter((l) => l.trim() !== '');
    expect(routes.length).toBeGreaterThan(0);
    for (const route of routes) {
      const fields = route.trim().split(/\s+/);
      expect(fields.at(-1) === 'lo' || /^(fe80|ff00)/.test(fields[0] ?? ''), route).toBe(true);
    }
    expect(await out(cwd, 'v6-addresses')).not.toMatch(/^(?!fe80|0{31}1)\S{32} /m);
    const upstream = await readFile(world.upstreamLog, 'utf8');
    expect(upstream).not.toContain('2001:db8');
  });

  it('a rule of the egress chains removed between two pairs is seen (the kernel change feed) and put back before the second pair starts; an unchanged ruleset is not listed again', async () => {
    let listings = 0;
    const counting: IptablesRunner = (family, args) => {
      if (args.includes('-S')) listings += 1;
      return world.iptables(family, args);
    };
    const watch = rulesetWatchFor(['nsenter', ...world.nsenter], world.iptables);
    const network = new DockerEgressNetwork(
      world.rt.docker,
      { proxy: DEFAULT_PROXY_PORT, sink: DEFAULT_SINK_PORT },
      counting,
      watch,
    );
    try {
      const gateway = await network.ensure();
      await network.ensure();
      listings = 0;
      await network.ensure();
      expect(listings, 'an unchanged ruleset is not listed').toBe(0);
      const rule = ['-p', 'udp', '-j', 'DNAT', '--to-destination', `${gateway}:${DEFAULT_SINK_PORT}`];
      await world.inEngineNs(['iptables', '-t', 'nat', '-D', 'ROBOGUIDE-EGRESS-NAT', ...rule]);
      await network.ensure();
      expect(listings).toBeGreaterThan(0);
      const { stdout } = await world.inEngineNs(['iptables', '-t', 'nat', '-S', 'ROBOGUIDE-EGRESS-NAT']);
      expect(stdout).toContain(`-A ROBOGUIDE-EGRESS-NAT ${rule.join(' ')}`);
      // The next pair's DNS around the proxy lands in the sink again: recorded, refused.
      const { dir } = await world.pair(
        `egr-watch-${world.tag}`,
        `timeout 6 nslookup allowed.test ${DNS} > out-dns 2>&1; true`,
        POLICY,
        { secret: SECRET },
      );
      expect((await egressRecords(dir)).find((r) => r.via === 'udp')).toMatchObject({
        port: 53,
        decision: 'refused',
      });
    } finally {
      watch.close();
    }
  });

  it('an engine restart: the network and the chains are there again before the next allowlisted pair runs, and it reaches only its hosts', async () => {
    await world.engine.kill();
    await world.engine.restart();
    const jobId = `egr-engine-${world.tag}`;
    const { result, cwd, dir } = await world.pair(
      jobId,
      [
        HELPERS,
        retried('allowed', 'http://allowed.test/'),
        `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | timeout 6 nc -w 3 ${ALLOWED} 80 > out-raw 2>&1`,
        'true',
      ].join('\n'),
      POLICY,
      { secret: SECRET },
    );
    expect(result.classification).toBe('completed');
    expect(await out(cwd, 'allowed')).toContain('upstream');
    expect(await out(cwd, 'raw')).not.toContain('upstream');
    expect((await egressRecords(dir)).find((r) => r.via === 'tcp')).toMatchObject({
      reason: 'not_through_proxy',
    });
  });
});
