import { describe, expect, it } from 'vitest';
import { engineProductOf } from '../../src/adapters/docker/engine-probe.js';

describe('engineProductOf (the version endpoint)', () => {
  it('Podman names itself in Components, with its own version (measured: Debian podman 4.3.1)', () => {
    const podman = {
      Version: '4.3.1',
      ApiVersion: '1.41',
      Components: [
        { Name: 'Podman Engine', Version: '4.3.1' },
        { Name: 'Conmon', Version: 'conmon version 2.1.6' },
      ],
    };
    expect(engineProductOf(podman)).toEqual({ product: 'podman', version: '4.3.1' });
  });
  it('Docker (Engine component, or none at all) is Docker', () => {
    expect(
      engineProductOf({
        Version: '20.10.24',
        ApiVersion: '1.41',
        Components: [
          { Name: 'Engine', Version: '20.10.24' },
          { Name: 'containerd', Version: '1.6' },
        ],
      }),
    ).toEqual({ product: 'docker', version: '20.10.24' });
    expect(engineProductOf({ Version: '20.10.24', ApiVersion: '1.41', Components: null })).toEqual({
      product: 'docker',
      version: '20.10.24',
    });
  });
});
