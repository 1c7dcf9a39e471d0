import { describe, expect, it, vi } from 'vitest';
import { DockerPairNetwork } from '../../src/adapters/docker/docker-pair-network.js';
import { pairNetworkCheck } from '../../src/app/doctor/network-check.js';
import type { PairNetworkGuard } from '../../src/app/ports/pair-network.js';
import { parseManifest, parsePairSpec } from '../../src/core/manifest/parse.js';
import {
  chainListingMatches,
  expectedChainListing,
  PAIRS_BRIDGE,
  PAIRS_CHAIN,
  PAIRS_NETWORK,
  pairsNetworkProblem,
  pairsNetworkSetting,
  type PairsNetworkReport,
} from '../../src/core/pair-network.js';
import { buildReceipt } from '../../src/core/receipt.js';
import { fakeDocker, fakeIptables } from '../support/fake-pair-network.js';

const job = (extra: Record<string, unknown> = {}) => ({
  job_id: 'p1',
  argv: ['/bin/true'],
  cwd: '/w',
  outcome_path: '/o/p1.json',
  image: 'i:1',
  ...extra,
});
const manifest = (extra: Record<string, unknown>) => ({
  schema: 'roboguide.e1.batch/v0.1',
  jobs: [job(extra)],
});

describe('the network field of a job and of a pair spec', () => {
  it('defaults to "bridge" and takes "none"', () => {
    const parsed = parseManifest(JSON.stringify(manifest({})));
    expect(parsed.ok && parsed.manifest.jobs[0]?.network).toBe('bridge');
    const none = parsePairSpec(job({ network: 'none' }));
    expect(none.ok && none.spec.network).toBe('none');
  });

  it.each([['host'], ['container:abc'], [''], [42], [{ egress: ['api.example.com:443'] }], [null]])(
    'refuses %j, naming the field and the rule',
    (value) => {
      const parsed = parseManifest(JSON.stringify(manifest({ network: value })));
      expect(parsed.ok).toBe(false);
      if (!parsed.ok)
        expect(parsed.issues).toContainEqual({ path: 'jobs[0].network', rule: 'must be "none" or "bridge"' });
      const spec = parsePairSpec(job({ network: value }));
      expect(spec.ok).toBe(false);
      if (!spec.ok)
        expect(spec.issues).toContainEqual({ path: 'network', rule: 'must be "none" or "bridge"' });
    },
  );

  it('refuses published ports on network "none" (the engine would publish nothing), at the ports field', () => {
    const rule = 'published ports need network "bridge" (network "none" publishes nothing)';
    const parsed = parseManifest(JSON.stringify(manifest({ network: 'none', ports: [41000] })));
    expect(parsed.ok).toBe(false);
    if (!parsed.ok) expect(parsed.issues).toEqual([{ path: 'jobs[0].ports', rule }]);
    const spec = parsePairSpec(job({ network: 'none', ports: [41000] }));
    expect(spec.ok).toBe(false);
    if (!spec.ok) expect(spec.issues).toEqual([{ path: 'ports', rule }]);
    expect(parsePairSpec(job({ network: 'bridge', ports: [41000] })).ok).toBe(true);
  });

  it('is recorded in the receipt with the engine network it maps to', () => {
    const base: Omit<Parameters<typeof buildReceipt>[0], 'network'> = {
      batchId: 'b',
      jobId: 'p1',
      claimId: 'c',
      claimedAt: new Date(0),
      supervisor: { pid: 1, start_ticks: '1', boot_id: null },
      reservationId: 'r',
      image: 'i:1',
      outcomePath: '/o/p1.json',
      sourceSha256: {},
      codeVersion: 'v',
      runtime: 'runc',
    };
    expect(buildReceipt({ ...base, network: 'bridge' }).network).toEqual({
      choice: 'bridge',
      engine_network: PAIRS_NETWORK,
    });
    expect(buildReceipt({ ...base, network: 'none' }).network).toEqual({
      choice: 'none',
      engine_network: 'none',
    });
  });
});

describe('ROBOGUIDE_PAIRS_NETWORK', () => {
  it('is guarded unless it says engine-bridge; anything else is refused', () => {
    expect(pairsNetworkSetting(undefined)).toEqual({ ok: true, setting: 'guarded' });
    expect(pairsNetworkSetting('')).toEqual({ ok: true, setting: 'guarded' });
    expect(pairsNetworkSetting('guarded')).toEqual({ ok: true, setting: 'guarded' });
    expect(pairsNetworkSetting('engine-bridge')).toEqual({ ok: true, setting: 'engine-bridge' });
    expect(pairsNetworkSetting('off')).toMatchObject({ ok: false });
  });
});

describe('the network of that name', () => {
  const ours = {
    driver: 'bridge',
    labels: { 'roboguide.network': 'pairs' },
    options: {
      'com.docker.network.bridge.enable_icc': 'false',
      'com.docker.network.bridge.name': PAIRS_BRIDGE,
    },
  };
  it('is used only when it is ours, a bridge, ICC off, on our bridge name', () => {
    expect(pairsNetworkProblem(ours)).toBeNull();
    expect(pairsNetworkProblem({ ...ours, labels: {} })).toMatch(/is not ours/);
    expect(pairsNetworkProblem({ ...ours, driver: 'macvlan' })).toMatch(/driver macvlan/);
    expect(
      pairsNetworkProblem({
        ...ours,
        options: { ...ours.options, 'com.docker.network.bridge.enable_icc': 'true' },
      }),
    ).toMatch(/reach each other/);
    expect(
      pairsNetworkProblem({ ...ours, options: { 'com.docker.network.bridge.enable_icc': 'false' } }),
    ).toMatch(/not on bridge/);
  });
});

describe('the chain listing', () => {
  it('matches only our rules in our order', () => {
    const listing = `${expectedChainListing('ipv4').join('\n')}\n`;
    expect(chainListingMatches('ipv4', listing)).toBe(true);
    const lines = expectedChainListing('ipv4');
    expect(chainListingMatches('ipv4', [lines[0], ...lines.slice(2), lines[1]].join('\n'))).toBe(false);
    expect(chainListingMatches('ipv4', lines.slice(0, -1).join('\n'))).toBe(false);
    expect(chainListingMatches('ipv4', `${listing}-A ${PAIRS_CHAIN} -j ACCEPT\n`)).toBe(false);
    expect(chainListingMatches('ipv6', listing)).toBe(false);
    expect(lines.join('\n')).toContain('-d 169.254.169.254/32 -j REJECT');
    expect(lines.join('\n')).toContain('-m addrtype --dst-type LOCAL -j REJECT');
  });
});

describe('DockerPairNetwork over fakes of iptables and the engine', () => {
  const engineChains = { ipv4: ['INPUT', 'FORWARD', 'DOCKER-USER'], ipv6: ['INPUT', 'FORWARD'] };

  it('ensure creates the chain, its rules and the jumps, then the network with ICC off; a second ensure only lists (one call per family)', async () => {
    const ipt = fakeIptables(engineChains);
    const engine = fakeDocker();
    const guard = new DockerPairNetwork(engine.docker, ipt.run);
    await guard.ensure();
    expect(engine.networks.get(PAIRS_NETWORK)?.Options).toMatchObject({
      'com.docker.network.bridge.enable_icc': 'false',
      'com.docker.network.bridge.name': PAIRS_BRIDGE,
    });
    expect(ipt.chains.ipv4.get('INPUT')).toEqual([`-i ${PAIRS_BRIDGE} -j ${PAIRS_CHAIN}`]);
    expect(ipt.chains.ipv4.get('DOCKER-USER')).toEqual([`-i ${PAIRS_BRIDGE} -j ${PAIRS_CHAIN}`]);
    expect(ipt.chains.ipv6.get('INPUT')).toEqual([`-i ${PAIRS_BRIDGE} -j ${PAIRS_CHAIN}`]);
    expect(await guard.check()).toEqual({
      network: { state: 'ok' },
      rules: [
        { family: 'ipv4', ok: true, missing: [] },
        { family: 'ipv6', ok: true, missing: [] },
      ],
    });
    const before = ipt.calls.length;
    await guard.ensure();
    // One listing per family, nothing written: the cost of every create once all is in place.
    expect(ipt.calls.slice(before)).toEqual(['ipv4 -S', 'ipv6 -S']);
  });

  it('prepare begins the first listing (both families at once) and the next ensure takes it: one listing, then the network', async () => {
    const ipt = fakeIptables(engineChains);
    const engine = fakeDocker();
    const guard = new DockerPairNetwork(engine.docker, ipt.run);
    guard.prepare();
    await new Promise((resolve) => setImmediate(resolve));
    // What the first ensure lists and makes (the chain, its rules, the jumps), done now; the network waits for ensure.
    expect(ipt.calls.filter((c) => c.endsWith(' -S'))).toEqual(['ipv4 -S', 'ipv6 -S']);
    expect(ipt.chains.ipv4.get('INPUT')).toEqual([`-i ${PAIRS_BRIDGE} -j ${PAIRS_CHAIN}`]);
    expect(engine.networks.has(PAIRS_NETWORK)).toBe(false);
    const before = ipt.calls.length;
    await guard.ensure();
    expect(ipt.calls.slice(before).filter((c) => c.endsWith(' -S'))).toEqual([]);
    expect(engine.networks.has(PAIRS_NETWORK)).toBe(true);
    expect((await guard.check()).rules.every((r) => r.ok)).toBe(true);
    // Taken once: the next ensure lists again, and a prepare after the first listing does nothing.
    guard.prepare();
    const after = ipt.calls.length;
    await guard.ensure();
    expect(ipt.calls.slice(after)).toEqual(['ipv4 -S', 'ipv6 -S']);
  });

  it("the network's inspect runs beside the listing, not after it; a network found missing is still made after the rules (issue 39)", async () => {
    const ipt = fakeIptables(engineChains);
    const engine = fakeDocker();
    const order: string[] = [];
    let releaseListing: () => void = () => undefined;
    const listingHeld = new Promise<void>((resolve) => (releaseListing = resolve));
    const inspect = engine.docker.getNetwork.bind(engine.docker);
    const docker = {
      ...engine.docker,
      getNetwork: (name: string) => {
        const network = inspect(name);
        return {
          ...network,
          inspect: () => {
            order.push('inspect');
            return network.inspect();
          },
        };
      },
      createNetwork: (options: Parameters<typeof engine.docker.createNetwork>[0]) => {
        order.push('create network');
        return engine.docker.createNetwork(options);
      },
    } as unknown as typeof engine.docker;
    const guard = new DockerPairNetwork(docker, async (family, args) => {
      if (args.length === 1 && args[0] === '-S') {
        order.push(`listing ${family}`);
        await listingHeld;
      } else order.push(`${family} ${args.join(' ')}`);
      return ipt.run(family, args);
    });
    for (const prepared of [true, false]) {
      order.length = 0;
      if (prepared) guard.prepare();
      const ensured = guard.ensure();
      await new Promise((resolve) => setTimeout(resolve, 20));
      // Asked while both listings still wait.
      expect(order.slice(0, 3).sort()).toEqual(['inspect', 'listing ipv4', 'listing ipv6']);
      releaseListing();
      await ensured;
      // Missing at the first inspect: made once the rules are in place, after every iptables call.
      if (prepared) expect(order.at(-2)).toBe('create network');
    }
    expect(engine.networks.has(PAIRS_NETWORK)).toBe(true);
  });

  it('a prepared listing that failed is the failure of the ensure that takes it; one older than 5 s is not taken', async () => {
    const failing = fakeIptables(engineChains);
    const run = failing.run;
    let broken = true;
    const guard = new DockerPairNetwork(fakeDocker().docker, (family, args) =>
      broken ? Promise.reject(new Error('iptables: lock held')) : run(family, args),
    );
    guard.prepare();
    broken = false;
    await expect(guard.ensure()).rejects.toThrow('iptables: lock held');

    const ipt = fakeIptables(engineChains);
    const stale = new DockerPairNetwork(fakeDocker().docker, ipt.run);
    const clock = vi.spyOn(performance, 'now');
    try {
      clock.mockReturnValue(1_000);
      stale.prepare();
      await new Promise((resolve) => setImmediate(resolve));
      // A rule removed after that listing: an ensure 5 s later lists again and puts it back.
      ipt.chains.ipv4.set('INPUT', []);
      clock.mockReturnValue(6_001);
      const before = ipt.calls.length;
      await stale.ensure();
      expect(ipt.calls.slice(before).filter((c) => c.endsWith(' -S'))).toEqual(['ipv4 -S', 'ipv6 -S']);
      expect(ipt.chains.ipv4.get('INPUT')).toEqual([`-i ${PAIRS_BRIDGE} -j ${PAIRS_CHAIN}`]);
    } finally {
      clock.mockRestore();
    }
  });

  it('a prepared listing too old to take, still running (a held xtables lock), ends before the new one begins', async () => {
    const ipt = fakeIptables(engineChains);
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => (release = resolve));
    let first = true;
    const order: string[] = [];
    const guard = new DockerPairNetwork(fakeDocker().docker, async (family, args) => {
      if (first && family === 'ipv4') {
        first = false;
        order.push('old listing waits for the lock');
        await held;
        order.push('old listing done');
      } else if (args[0] === '-S' && args.length === 1) order.push(`listing ${family}`);
      return ipt.run(family, args);
    });
    const clock = vi.spyOn(performance, 'now');
    try {
      clock.mockReturnValue(1_000);
      guard.prepare();
      clock.mockReturnValue(7_000);
      const ensured = guard.ensure();
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect(order.filter((o) => o === 'listing ipv4')).toEqual([]); // the new one waits for the old
      release();
      await ensured;
      expect(order.indexOf('old listing done')).toBeLessThan(order.lastIndexOf('listing ipv4'));
      expect((await guard.check()).rules.every((r) => r.ok)).toBe(true);
    } finally {
      clock.mockRestore();
    }
  });

  it('a chain edited by hand is rewritten whole', async () => {
    const ipt = fakeIptables(engineChains);
    const guard = new DockerPairNetwork(fakeDocker().docker, ipt.run);
    await guard.ensure();
    ipt.chains.ipv4.get(PAIRS_CHAIN)?.unshift('-j ACCEPT');
    expect((await guard.check()).rules[0]).toEqual({
      family: 'ipv4',
      ok: false,
      missing: [`the rules of ${PAIRS_CHAIN} (they differ)`],
    });
    await guard.ensure();
    expect((await guard.check()).rules[0]?.ok).toBe(true);
  });

  it('an engine that creates DOCKER-USER with its first network: that jump is added once our network exists', async () => {
    const ipt = fakeIptables({ ipv4: ['INPUT', 'FORWARD'], ipv6: ['INPUT'] });
    const engine = fakeDocker();
    const create = engine.docker.createNetwork.bind(engine.docker);
    engine.docker.createNetwork = ((options: Parameters<typeof create>[0]) => {
      ipt.chains.ipv4.set('DOCKER-USER', []);
      return create(options);
    }) as typeof create;
    const guard = new DockerPairNetwork(engine.docker, ipt.run);
    await guard.ensure();
    expect(ipt.chains.ipv4.get('DOCKER-USER')).toEqual([`-i ${PAIRS_BRIDGE} -j ${PAIRS_CHAIN}`]);
    expect((await guard.check()).rules.every((r) => r.ok)).toBe(true);
  });

  it("another process creating the network at the same moment (the engine's 403, same bridge name): it is checked and used as any existing one; a refusal that leaves no network fails", async () => {
    const ipt = fakeIptables(engineChains);
    const engine = fakeDocker();
    const create = engine.docker.createNetwork.bind(engine.docker);
    engine.docker.createNetwork = (async (options: Parameters<typeof create>[0]) => {
      await create(options); // the other process's, in the same instant
      throw Object.assign(
        new Error('conflicts with network 95be1c72 (rg-pairs0): networks have same bridge name'),
        {
          statusCode: 403,
        },
      );
    }) as typeof create;
    await new DockerPairNetwork(engine.docker, ipt.run).ensure();
    expect(engine.networks.get(PAIRS_NETWORK)?.Options).toMatchObject({
      'com.docker.network.bridge.enable_icc': 'false',
    });
    const refusing = fakeDocker();
    refusing.docker.createNetwork = (() =>
      Promise.reject(Object.assign(new Error('the pool overlaps'), { statusCode: 403 }))) as typeof create;
    await expect(
      new DockerPairNetwork(refusing.docker, fakeIptables(engineChains).run).ensure(),
    ).rejects.toThrow(/the pool overlaps/);
  });

  it('without DOCKER-USER even after the network exists (an engine without its own rules), ensure refuses', async () => {
    const ipt = fakeIptables({ ipv4: ['INPUT', 'FORWARD'], ipv6: ['INPUT'] });
    const guard = new DockerPairNetwork(fakeDocker().docker, ipt.run);
    await expect(guard.ensure()).rejects.toMatchObject({
      code: 'E_NETWORK',
      message: expect.stringMatching(/no chain DOCKER-USER/) as unknown,
    });
  });

  it('refuses a network of that name that is not ours or lets its containers reach each other, and never removes one that is not ours', async () => {
    const engine = fakeDocker();
    engine.networks.set(PAIRS_NETWORK, { Name: PAIRS_NETWORK, Driver: 'bridge', Labels: {}, Options: {} });
    const guard = new DockerPairNetwork(engine.docker, fakeIptables(engineChains).run);
    await expect(guard.ensure()).rejects.toMatchObject({
      code: 'E_NETWORK',
      message: expect.stringMatching(/is not ours/) as unknown,
    });
    await expect(guard.remove()).rejects.toMatchObject({ code: 'E_NETWORK' });
    expect(engine.networks.has(PAIRS_NETWORK)).toBe(true);
    expect((await guard.check()).network).toMatchObject({ state: 'foreign' });
  });

  it('remove takes the network, then every jump (duplicates too) and the chain; while a container is on the network it removes nothing', async () => {
    const ipt = fakeIptables(engineChains);
    const engine = fakeDocker();
    const guard = new DockerPairNetwork(engine.docker, ipt.run);
    await guard.ensure();
    ipt.chains.ipv4.get('INPUT')?.push(`-i ${PAIRS_BRIDGE} -j ${PAIRS_CHAIN}`); // a race of two ensure
    engine.inUse.value = true;
    await expect(guard.remove()).rejects.toMatchObject({
      code: 'E_NETWORK',
      message: expect.stringMatching(/in use/) as unknown,
    });
    expect((await guard.check()).rules.every((r) => r.ok)).toBe(true);
    engine.inUse.value = false;
    expect(await guard.remove()).toEqual({ network: 'removed', rules: 'removed' });
    expect(ipt.chains.ipv4.get('INPUT')).toEqual([]);
    expect(ipt.chains.ipv4.get('DOCKER-USER')).toEqual([]);
    expect(ipt.chains.ipv4.has(PAIRS_CHAIN)).toBe(false);
    expect(ipt.chains.ipv6.has(PAIRS_CHAIN)).toBe(false);
    expect(await guard.remove()).toEqual({ network: 'absent', rules: 'absent' });
  });
});

describe('doctor: the pairs network check', () => {
  const report = (network: PairsNetworkReport['network'], rulesOk: boolean): PairsNetworkReport => ({
    network,
    rules: [
      { family: 'ipv4', ok: rulesOk, missing: rulesOk ? [] : ['the jump from DOCKER-USER'] },
      { family: 'ipv6', ok: true, missing: [] },
    ],
  });
  const guardReporting = (r: PairsNetworkReport | Error): PairNetworkGuard => ({
    ensure: () => Promise.resolve(),
    check: () => (r instanceof Error ? Promise.reject(r) : Promise.resolve(r)),
    remove: () => Promise.resolve({ network: 'absent', rules: 'absent' }),
  });

  it.each<[string, PairsNetworkReport | Error, string]>([
    ['everything in place', report({ state: 'ok' }, true), 'ok'],
    ['nothing set up yet', report({ state: 'missing' }, false), 'warn'],
    ['the network without its rules (a pair on it is unguarded)', report({ state: 'ok' }, false), 'fail'],
    [
      'a network of that name that is not ours',
      report({ state: 'foreign', problem: 'not ours' }, true),
      'fail',
    ],
    ['iptables cannot be read', new Error('iptables is not installed'), 'fail'],
  ])('%s: %s', async (_what, r, status) => {
    expect(await pairNetworkCheck(guardReporting(r))).toMatchObject({ name: 'pairs network', status });
  });

  it('warns when ROBOGUIDE_PAIRS_NETWORK turned the guard off', async () => {
    expect(await pairNetworkCheck('engine-bridge')).toMatchObject({
      status: 'warn',
      detail: expect.stringMatching(/unguarded/) as unknown,
    });
  });
});
