import { describe, expect, it } from 'vitest';
import { createRequest } from '../../../src/adapters/docker/container-create.js';

/** What docker-modem makes of it (`buildQuerystring(opts._query || opts)`, `JSON.stringify(opts._body || opts)`). */
describe('createRequest: a create as the Engine API takes it', () => {
  const signal = AbortSignal.timeout(60_000);

  it('the name alone in the query, the configuration alone in the body, the signal beside them', () => {
    const request = createRequest(
      { name: 'roboguide-a', Image: 'x', Env: ['SECRET=s3cr3t'], HostConfig: { NetworkMode: 'none' } },
      signal,
    ) as Record<string, unknown>;
    expect(request).toEqual({
      _query: { name: 'roboguide-a' },
      _body: { Image: 'x', Env: ['SECRET=s3cr3t'], HostConfig: { NetworkMode: 'none' } },
      abortSignal: signal,
    });
  });

  it("the query's other parameter (platform) in the query too", () => {
    const request = createRequest({ name: 'n', platform: 'linux/arm64', Image: 'x' }, signal) as Record<
      string,
      unknown
    >;
    expect(request['_query']).toEqual({ name: 'n', platform: 'linux/arm64' });
    expect(request['_body']).toEqual({ Image: 'x' });
  });

  it('no name: an empty query (the engine names the container)', () => {
    expect((createRequest({ Image: 'x' }, signal) as Record<string, unknown>)['_query']).toEqual({});
  });
});
