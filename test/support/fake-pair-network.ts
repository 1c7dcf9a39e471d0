import type { DockerPairNetwork, IptablesRunner } from '../../src/adapters/docker/docker-pair-network.js';
import type { IpFamily } from '../../src/core/pair-network.js';

/** iptables as a table of chains: enough of `-S`, `-N`, `-F`, `-X`, `-A`, `-I`, `-C`, `-D` for the adapter. */
export function fakeIptables(builtIn: Record<IpFamily, string[]>): {
  run: IptablesRunner;
  chains: Record<IpFamily, Map<string, string[]>>;
  calls: string[];
} {
  const chains: Record<IpFamily, Map<string, string[]>> = {
    ipv4: new Map(builtIn.ipv4.map((c) => [c, []])),
    ipv6: new Map(builtIn.ipv6.map((c) => [c, []])),
  };
  const calls: string[] = [];
  const run: IptablesRunner = (family, args) => {
    calls.push(`${family} ${args.join(' ')}`);
    const table = chains[family];
    const [op, chain = '', ...rest] = args;
    const ok = (stdout = '') => Promise.resolve({ code: 0, stdout, stderr: '' });
    const no = () => Promise.resolve({ code: 1, stdout: '', stderr: 'No chain/target/match by that name.' });
    const rules = table.get(chain);
    switch (op) {
      case '-S':
        if (args.length === 1) {
          const all = [...table.entries()];
          return ok(
            [...all.map(([c]) => `-N ${c}`), ...all.flatMap(([c, rs]) => rs.map((r) => `-A ${c} ${r}`))].join(
              '\n',
            ) + '\n',
          );
        }
        return rules === undefined
          ? no()
          : ok([`-N ${chain}`, ...rules.map((r) => `-A ${chain} ${r}`)].join('\n') + '\n');
      case '-N':
        if (rules !== undefined) return no();
        table.set(chain, []);
        return ok();
      case '-F':
        if (rules === undefined) return no();
        rules.length = 0;
        return ok();
      case '-X':
        return table.delete(chain) ? ok() : no();
      case '-A':
        if (rules === undefined) return no();
        rules.push(rest.join(' '));
        return ok();
      case '-I':
        if (rules === undefined) return no();
        rules.unshift(rest.slice(1).join(' '));
        return ok();
      case '-C':
        return rules?.includes(rest.join(' ')) === true ? ok() : no();
      case '-D': {
        const at = rules?.indexOf(rest.join(' ')) ?? -1;
        if (rules === undefined || at < 0) return no();
        rules.splice(at, 1);
        return ok();
      }
      default:
        return no();
    }
  };
  return { run, chains, calls };
}

/** The engine's network endpoints, as dockerode calls them. */
export function fakeDocker(): {
  docker: ConstructorParameters<typeof DockerPairNetwork>[0];
  networks: Map<
    string,
    { Name: string; Driver: string; Labels: Record<string, string>; Options: Record<string, string> }
  >;
  inUse: { value: boolean };
} {
  const networks = new Map<
    string,
    { Name: string; Driver: string; Labels: Record<string, string>; Options: Record<string, string> }
  >();
  const inUse = { value: false };
  const notFound = () => Object.assign(new Error('network not found'), { statusCode: 404 });
  const docker = {
    getNetwork: (name: string) => ({
      inspect: () => (networks.has(name) ? Promise.resolve(networks.get(name)) : Promise.reject(notFound())),
      remove: () => {
        if (!networks.has(name)) return Promise.reject(notFound());
        if (inUse.value)
          return Promise.reject(Object.assign(new Error('has active endpoints'), { statusCode: 403 }));
        networks.delete(name);
        return Promise.resolve();
      },
    }),
    createNetwork: (options: {
      Name: string;
      Driver: string;
      Labels: Record<string, string>;
      Options: Record<string, string>;
    }) => {
      networks.set(options.Name, {
        Name: options.Name,
        Driver: options.Driver,
        Labels: options.Labels,
        Options: options.Options,
      });
      return Promise.resolve({});
    },
  };
  // A dockerode client holding only the network calls DockerPairNetwork makes (a third-party class, not our port).
  return { docker: docker as unknown as ConstructorParameters<typeof DockerPairNetwork>[0], networks, inUse };
}
