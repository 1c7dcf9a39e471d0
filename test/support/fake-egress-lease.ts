import type { EgressLease } from '../../src/app/ports/egress.js';

/**
 * An egress lease of the test's (the port, not the broker): the proxy variables for `token`, the gateway as DNS, a
 * fixed link-layer address, and calls that do nothing unless `over` says what they do.
 */
export function fakeEgressLease(token: string, over: Partial<EgressLease> = {}): EgressLease {
  return {
    env: { HTTP_PROXY: `http://rg:${token}@10.0.0.1:3128` },
    dns: ['10.0.0.1'],
    token,
    mac: '02:00:00:00:00:01',
    attach: () => undefined,
    starting: () => undefined,
    started: () => undefined,
    setPolicy: () => Promise.resolve(),
    snapshot: () => ({ records: [], dropped: 0 }),
    close: () => Promise.resolve({ records: [], dropped: 0 }),
    ...over,
  };
}
