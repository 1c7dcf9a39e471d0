import { describe, expect, it } from 'vitest';
import { DockerEgressNetwork } from '../../../src/adapters/egress/docker-egress-network.js';
import type { IptablesRunner } from '../../../src/adapters/docker/docker-pair-network.js';
import { EGRESS_NETWORK } from '../../../src/core/egress/egress-network.js';

/** The egress network's creation against an engine of the test's (its network calls only) and a quiet iptables. */

type Docker = ConstructorParameters<typeof DockerEgressNetwork>[0];
interface Net {
  Name: string;
  Labels: Record<string, string>;
  Options: Record<string, string>;
  IPAM: { Config: { Subnet: string; Gateway: string }[] };
}

function engine(createNetwork: (options: Net, networks: Map<string, Net>) => Promise<unknown>) {
  const networks = new Map<string, Net>();
  const docker = {
    getNetwork: (name: string) => ({
      inspect: () =>
        networks.has(name)
          ? Promise.resolve(networks.get(name))
          : Promise.reject(Object.assign(new Error('network not found'), { statusCode: 404 })),
    }),
    createNetwork: (options: Omit<Net, 'IPAM'>) =>
      createNetwork(
        { ...options, IPAM: { Config: [{ Subnet: '172.30.0.0/16', Gateway: '172.30.0.1' }] } },
        networks,
      ),
  };
  return { docker: docker as unknown as Docker, networks };
}

const quiet: IptablesRunner = () => Promise.resolve({ code: 0, stdout: '', stderr: '' });
const made = (options: Net, networks: Map<string, Net>) => void networks.set(options.Name, options);

describe('DockerEgressNetwork: the network made once, whoever makes it', () => {
  it("another process creating it at the same moment (the engine's 403, same bridge name): it is checked and used", async () => {
    const { docker, networks } = engine((options, nets) => {
      made(options, nets); // the other process's, in the same instant
      return Promise.reject(
        Object.assign(
          new Error('conflicts with network bc698d82 (rg-egress0): networks have same bridge name'),
          {
            statusCode: 403,
          },
        ),
      );
    });
    const network = new DockerEgressNetwork(docker, { proxy: 3128, sink: 3129 }, quiet, null);
    expect(await network.ensure()).toBe('172.30.0.1');
    expect(networks.has(EGRESS_NETWORK)).toBe(true);
  });

  it('a refusal that leaves no network is the engine error it was', async () => {
    const { docker } = engine(() =>
      Promise.reject(
        Object.assign(new Error('could not find an available address pool'), { statusCode: 403 }),
      ),
    );
    const network = new DockerEgressNetwork(docker, { proxy: 3128, sink: 3129 }, quiet, null);
    await expect(network.ensure()).rejects.toThrow(/available address pool/);
  });

  it('two pairs of one process starting at once on a fresh engine both get the network', async () => {
    let creates = 0;
    const { docker } = engine(async (options, nets) => {
      creates += 1;
      await new Promise((resolve) => setTimeout(resolve, 20));
      if (nets.has(options.Name))
        throw Object.assign(new Error('networks have same bridge name'), { statusCode: 403 });
      made(options, nets);
    });
    const network = new DockerEgressNetwork(docker, { proxy: 3128, sink: 3129 }, quiet, null);
    expect(await Promise.all([network.ensure(), network.ensure()])).toEqual(['172.30.0.1', '172.30.0.1']);
    expect(creates).toBeGreaterThan(0);
  });
});
