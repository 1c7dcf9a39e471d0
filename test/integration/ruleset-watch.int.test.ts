import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { iptablesRunner, rulesetWatchFor } from '../../src/adapters/docker/docker-pair-network.js';
import type { RulesetWatch } from '../../src/adapters/docker/ruleset-watch.js';
import { listNetns, namespaceSupportProblem } from '../support/second-engine.js';

/**
 * The kernel's ruleset change feed the guard follows (issue 39), in a network namespace of the test's own (nothing of
 * this machine's firewall is read or changed): every change, made just before the question, is seen.
 */
const exec = promisify(execFile);
const problem = await namespaceSupportProblem();
const required = process.env['REQUIRE_DOCKER'] === '1';
const skip = problem !== null && !required;
if (skip) console.warn(`\n*** ruleset watch in a private namespace SKIPPED: ${problem} ***\n`);

const NS = `rg-w39rw-${randomUUID().slice(0, 6)}`;
const PREFIX = ['nsenter', `--net=/run/netns/${NS}`];

describe.skipIf(skip)('the ruleset change feed in a namespace of its own', () => {
  let watch: RulesetWatch;
  const inNs = (args: readonly string[]) => exec('nsenter', [`--net=/run/netns/${NS}`, ...args]);

  beforeAll(async () => {
    await exec('ip', ['netns', 'add', NS]);
    watch = rulesetWatchFor(PREFIX, iptablesRunner(PREFIX));
    await inNs(['iptables', '-w', '-N', 'RG-W39']);
  });

  afterAll(async () => {
    watch?.close();
    await exec('ip', ['netns', 'delete', NS]);
    expect(await listNetns()).not.toContain(NS);
  });

  it('vouches while nothing changes and never misses a change made just before the question', async () => {
    const first = await watch.mark();
    expect(first).not.toBeNull();
    expect(await watch.unchangedSince(first ?? -1)).toBe(true);
    let missed = 0;
    for (let i = 0; i < 60; i += 1) {
      const mark = await watch.mark();
      if (mark === null) throw new Error('the feed stopped vouching');
      // Alternately a rule added and removed, in either family, and a chain flushed.
      const change =
        i % 3 === 0
          ? ['iptables', '-w', '-A', 'RG-W39', '-j', 'RETURN']
          : i % 3 === 1
            ? ['ip6tables', '-w', '-N', `RG-W39-${i}`]
            : ['iptables', '-w', '-F', 'RG-W39'];
      await inNs(change);
      if (await watch.unchangedSince(mark)) missed += 1;
    }
    expect(missed).toBe(0);
  });
});
