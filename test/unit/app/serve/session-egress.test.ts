import { describe, expect, it } from 'vitest';
import { fakeEgressLease } from '../../../support/fake-egress-lease.js';
import type { EgressGate } from '../../../../src/app/ports/egress.js';
import { ApiError } from '../../../../src/app/serve/api-error.js';
import { SessionEgress } from '../../../../src/app/serve/session-egress.js';
import { effectiveEgress, type EgressInput } from '../../../../src/core/egress/policy.js';
import type { NetworkChoice } from '../../../../src/core/pair-network.js';

/** The switch of a live session's egress (docs/spec.md §5.6 "Sessions"): closed first, never wider on a failure. */

function world(options: { failJoin?: NetworkChoice } = {}) {
  const steps: string[] = [];
  const gate: EgressGate = {
    open: (policy, token) => {
      steps.push(`open ${policy.mode}`);
      return Promise.resolve(
        fakeEgressLease(token, {
          attach: (id) => void steps.push(`attach ${id}`),
          starting: () => void steps.push('starting'),
          started: () => void steps.push('started'),
          setPolicy: (p: EgressInput) => {
            steps.push(`policy ${p.mode}${p.allow !== undefined ? ` ${p.allow.join(',')}` : ''}`);
            return Promise.resolve();
          },
        }),
      );
    },
  };
  const engine = {
    moveNetwork: (id: string, to: NetworkChoice) => {
      steps.push(`move ${id} ${to}`);
      return to === options.failJoin ? Promise.reject(new Error('engine said no')) : Promise.resolve();
    },
  };
  return { steps, gate, engine };
}

const allow = (...hosts: string[]): EgressInput => ({ mode: 'allowlist', allow: hosts });

describe('SessionEgress', () => {
  it('open → allowlist: off the network first, then the lease, the egress network, the container attached', async () => {
    const { steps, gate, engine } = world();
    const egress = new SessionEgress(gate, effectiveEgress('bridge', undefined));
    expect(egress.execEnv()).toEqual({});
    expect(await egress.set(engine, 'c1', allow('a.test'))).toEqual(allow('a.test'));
    expect(steps).toEqual([
      'move c1 none',
      'open allowlist',
      'starting',
      'move c1 allowlist',
      'attach c1',
      'started',
    ]);
    expect(egress.execEnv()['HTTP_PROXY']).toContain(egress.token);
  });

  it('allowlist → open: the lease refuses everything before the container leaves; execs get the proxy variables emptied', async () => {
    const { steps, gate, engine } = world();
    const egress = new SessionEgress(gate, effectiveEgress('none', allow('a.test')));
    await egress.forCreate();
    steps.length = 0;
    await egress.set(engine, 'c1', { mode: 'open' });
    expect(steps).toEqual(['policy none', 'move c1 none', 'move c1 bridge']);
    expect(egress.execEnv()['HTTP_PROXY']).toBe('');
  });

  it('allowlist → allowlist only changes the lease (no network move)', async () => {
    const { steps, gate, engine } = world();
    const egress = new SessionEgress(gate, effectiveEgress('none', allow('a.test')));
    await egress.forCreate();
    steps.length = 0;
    await egress.set(engine, 'c1', allow('b.test'));
    expect(steps).toEqual(['policy allowlist b.test']);
  });

  it('a join that fails leaves mode "none" (off every network, lease refusing) and says so: never wider', async () => {
    const { steps, gate, engine } = world({ failJoin: 'bridge' });
    const egress = new SessionEgress(gate, effectiveEgress('none', allow('a.test')));
    await egress.forCreate();
    steps.length = 0;
    const err = await egress.set(engine, 'c1', { mode: 'open' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).status).toBe(503);
    expect((err as Error).message).toContain('mode "none"');
    expect(egress.input).toEqual({ mode: 'none' });
    expect(steps.slice(-2)).toEqual(['move c1 none', 'policy none']);
  });

  it('without a proxy an allowlist is refused (409 naming egress.mode) and nothing moves', async () => {
    const { steps, engine } = world();
    const egress = new SessionEgress(undefined, effectiveEgress('bridge', undefined));
    const err = await egress.set(engine, 'c1', allow('a.test')).catch((e: unknown) => e);
    expect((err as ApiError).status).toBe(409);
    expect(JSON.stringify((err as ApiError).issues)).toContain('egress.mode');
    expect(steps).toEqual([]);
    expect(egress.input).toEqual({ mode: 'open' });
  });

  it('a bad policy is refused with its field before anything happens', async () => {
    const { steps, gate, engine } = world();
    const egress = new SessionEgress(gate, effectiveEgress('bridge', undefined));
    const err = await egress.set(engine, 'c1', allow('*.com')).catch((e: unknown) => e);
    expect((err as ApiError).status).toBe(400);
    expect(JSON.stringify((err as ApiError).issues)).toContain('allow[0]');
    expect(steps).toEqual([]);
  });
});
