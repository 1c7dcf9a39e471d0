import { describe, expect, it } from 'vitest';
import { EngineFactsCache, ENGINE_FACTS_REUSE_MS } from '../../../../src/adapters/docker/engine-facts.js';
import type { InfoBody, VersionBody } from '../../../../src/adapters/docker/engine-probe.js';

/** An engine whose `info` + `version` answers are counted; `fail` makes the next answer a rejection. */
function engine() {
  const state = { asked: 0, fail: false };
  const ask = (): Promise<[InfoBody, VersionBody]> => {
    state.asked += 1;
    if (state.fail) return Promise.reject(new Error('connect ENOENT /var/run/docker.sock'));
    const info: InfoBody = { ID: `engine-${state.asked}` };
    const version: VersionBody = { Version: '28.0.0', ApiVersion: '1.48' };
    return Promise.resolve([info, version]);
  };
  return { state, ask };
}

describe('EngineFactsCache (issue 39: one info + version for a command start-up, not one per caller)', () => {
  it('calls close together share one answer, concurrent or one after the other', async () => {
    const { state, ask } = engine();
    let now = 1_000;
    const facts = new EngineFactsCache(ask, { now: () => now });
    const [a, b] = await Promise.all([facts.get(), facts.get()]);
    now += ENGINE_FACTS_REUSE_MS - 1;
    const c = await facts.get();
    expect(state.asked).toBe(1);
    expect([a[0].ID, b[0].ID, c[0].ID]).toEqual(['engine-1', 'engine-1', 'engine-1']);
  });

  it('asks again once the reuse window has passed', async () => {
    const { state, ask } = engine();
    let now = 0;
    const facts = new EngineFactsCache(ask, { now: () => now });
    await facts.get();
    now += ENGINE_FACTS_REUSE_MS;
    expect((await facts.get())[0].ID).toBe('engine-2');
    expect(state.asked).toBe(2);
  });

  it('never keeps a failure: an engine that did not answer is asked again at the next call', async () => {
    const { state, ask } = engine();
    const facts = new EngineFactsCache(ask, { now: () => 0 });
    state.fail = true;
    await expect(facts.get()).rejects.toThrow(/ENOENT/);
    state.fail = false;
    expect((await facts.get())[0].ID).toBe('engine-2');
    expect(state.asked).toBe(2);
  });
});
