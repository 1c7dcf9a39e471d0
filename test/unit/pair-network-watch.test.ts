import { describe, expect, it } from 'vitest';
import { DockerPairNetwork } from '../../src/adapters/docker/docker-pair-network.js';
import type { RulesetWatch } from '../../src/adapters/docker/ruleset-watch.js';
import { PAIRS_BRIDGE, PAIRS_CHAIN } from '../../src/core/pair-network.js';
import { fakeDocker, fakeIptables } from '../support/fake-pair-network.js';

/** A change feed the test drives: `change()` is a ruleset commit by anyone; `broken` a feed that cannot vouch. */
function fakeWatch(): RulesetWatch & { change(): void; broken: boolean; marks: number } {
  let epoch = 0;
  const watch = {
    broken: false,
    marks: 0,
    change: () => {
      epoch += 1;
    },
    mark: () => {
      watch.marks += 1;
      return Promise.resolve(watch.broken ? null : epoch);
    },
    unchangedSince: (mark: number) => Promise.resolve(!watch.broken && mark === epoch),
    close: () => undefined,
  };
  return watch;
}

const engineChains = { ipv4: ['INPUT', 'FORWARD', 'DOCKER-USER'], ipv6: ['INPUT', 'FORWARD'] };
const jump = `-i ${PAIRS_BRIDGE} -j ${PAIRS_CHAIN}`;

describe('the guard with a change feed (issue 39): no listing per create while the ruleset is unchanged', () => {
  it('lists once; later creates spawn no iptables until the feed reports a change', async () => {
    const ipt = fakeIptables(engineChains);
    const watch = fakeWatch();
    const guard = new DockerPairNetwork(fakeDocker().docker, ipt.run, watch);
    await guard.ensure();
    // A process's first create does not start the feed (a `pair run` has one create).
    expect(watch.marks).toBe(0);
    // Setting the rules up is a change the feed reports: the next create lists once more and finds all in place.
    watch.change();
    await guard.ensure();
    const settled = ipt.calls.length;
    for (let i = 0; i < 5; i += 1) await guard.ensure();
    expect(ipt.calls.slice(settled)).toEqual([]);
  });

  it('a jump removed between two creates is put back before the second create returns', async () => {
    const ipt = fakeIptables(engineChains);
    const watch = fakeWatch();
    const guard = new DockerPairNetwork(fakeDocker().docker, ipt.run, watch);
    await guard.ensure();
    watch.change();
    await guard.ensure();
    // By hand, between two pairs: the kernel reports the commit.
    ipt.chains.ipv4.set('DOCKER-USER', []);
    watch.change();
    await guard.ensure();
    expect(ipt.chains.ipv4.get('DOCKER-USER')).toEqual([jump]);
  });

  it('a feed that cannot vouch (not running, not caught up) means a listing at every create, as without one', async () => {
    const ipt = fakeIptables(engineChains);
    const watch = fakeWatch();
    watch.broken = true;
    const guard = new DockerPairNetwork(fakeDocker().docker, ipt.run, watch);
    await guard.ensure();
    const before = ipt.calls.length;
    ipt.chains.ipv4.get(PAIRS_CHAIN)?.splice(0, 1);
    await guard.ensure();
    expect(ipt.calls.slice(before)).toContain('ipv4 -S');
    expect((await guard.check()).rules.every((r) => r.ok)).toBe(true);
  });

  it('a failed listing vouches for nothing: the next create lists again', async () => {
    const ipt = fakeIptables(engineChains);
    const watch = fakeWatch();
    let fail = true;
    const guard = new DockerPairNetwork(
      fakeDocker().docker,
      (family, args) =>
        fail && args[0] === '-S'
          ? Promise.resolve({ code: 4, stdout: '', stderr: 'locked' })
          : ipt.run(family, args),
      watch,
    );
    await expect(guard.ensure()).rejects.toMatchObject({ code: 'E_NETWORK' });
    fail = false;
    const before = ipt.calls.length;
    await guard.ensure();
    expect(ipt.calls.length).toBeGreaterThan(before);
  });
});
