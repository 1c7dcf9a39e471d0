// A "supervisor" of the egress tests (issue 42) as a process of its own, so that a test can SIGKILL it mid-pair:
// runs one `pair run` from the built code (dist/) with an egress gate of the test's world. Argument: a JSON object
// {socketPath, nsenter, gateOptions (without the runner), spec, output, secret, registry, cwd}.
import { DockerContainerRuntime } from '../../dist/adapters/docker/docker-container-runtime.js';
import { iptablesRunner } from '../../dist/adapters/docker/docker-pair-network.js';
import { createEgressGate } from '../../dist/adapters/egress/egress-gate.js';
import { NodeFileSystem } from '../../dist/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../../dist/adapters/registry/sqlite-capacity-registry.js';
import { silentLogger } from '../../dist/app/ports/logger.js';
import { runPair } from '../../dist/app/pair/run-pair.js';
import { createExecutePairDeps } from '../../dist/composition-root.js';

const args = JSON.parse(process.argv[2] ?? '{}');
const rt = new DockerContainerRuntime({ socketPath: args.socketPath });
const gate = createEgressGate(rt.docker, {
  ...args.gateOptions,
  iptables: iptablesRunner(['nsenter', ...args.nsenter]),
});
const registry = SqliteCapacityRegistry.open({ path: args.registry });
await registry.setLimits({ maxReservations: 10, gpuMib: null });
const outcome = await runPair(
  { ...createExecutePairDeps(rt, silentLogger), fs: new NodeFileSystem(), registry, egress: gate },
  {
    specText: JSON.stringify(args.spec),
    specSource: 'spec.json',
    output: args.output,
    bindAddress: '0.0.0.0',
    environment: { API_TOKEN: args.secret },
    codeVersion: 'test',
    cwd: args.cwd,
  },
);
process.stdout.write(`finished ${outcome.result.classification}\n`);
process.exit(0);
