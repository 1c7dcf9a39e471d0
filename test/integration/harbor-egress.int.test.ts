import { execFile, execFileSync } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EgressRecord } from '../../src/core/egress/record.js';
import { startServe, type RunningServe } from '../../src/serve-root.js';
import { DRIVER_IMAGE, noDocker } from '../support/docker.js';
import { ALLOWED, OTHER, startEgressWorld, type EgressWorld } from '../support/egress-session-world.js';
import { HELPERS } from '../support/egress-pair.js';
import { fakeLogger } from '../support/fakes.js';
import { namespaceSupportProblem } from '../support/second-engine.js';

/**
 * Issue 42, "Done when": a Harbor `Trial`, driven through Harbor's REAL classes (as `npm run test:frameworks` does),
 * switches a roboguide session from open to allowlist between phases. clients/python/frameworks/harbor_egress.py runs
 * `Trial.create(TrialConfig(...)).run()` on a task whose environment is public and whose `[agent]` phase is
 * `network_mode = "allowlist"`: Harbor validates the environment's capabilities and calls `set_network_policy` around
 * `agent.run` (`Trial._phase_network_policy`). Its agent runs the probes below in the set-up phase and in the agent
 * phase; the verifier runs back at the baseline. What reached the "internet" is read from the upstream's own log, what
 * was refused from the session's egress.jsonl. A throwaway engine with its own firewall and upstream hosts
 * (test/support/egress-session-world.ts); the frameworks' environment is the runner's (fwvenv.py, cached).
 */
const exec = promisify(execFile);
const PYTHON = process.env['FRAMEWORKS_PYTHON'] ?? 'python3';
const SCRIPT = join(import.meta.dirname, '../../clients/python/frameworks/harbor_egress.py');
const required = process.env['REQUIRE_DOCKER'] === '1';
const namespaceProblem = noDocker ? 'no Docker engine' : await namespaceSupportProblem();
/** Whether the frameworks and wheels are here, and the runner's test image (bash, users; made on the engine if missing). */
const probe = ((): { skip: string | null; image: string | null } => {
  if (noDocker) return { skip: 'no Docker engine', image: null };
  try {
    return JSON.parse(execFileSync(PYTHON, [SCRIPT, '--probe'], { encoding: 'utf8' })) as {
      skip: string | null;
      image: string | null;
    };
  } catch (err) {
    return { skip: `${PYTHON} ${SCRIPT} --probe failed: ${(err as Error).message}`, image: null };
  }
})();
const IMAGE = probe.image ?? '';
const problem = (namespaceProblem !== null && !required ? namespaceProblem : null) ?? probe.skip;
if (problem !== null)
  console.warn(`\n*** Harbor trial with an allowlisted agent phase SKIPPED: ${problem} ***\n`);

/** A raw HTTP request made directly to `address` (no proxy), its answer printed. */
const direct = (address: string, path: string, host: string): string =>
  `printf 'GET ${path} HTTP/1.0\\r\\nHost: ${host}\\r\\n\\r\\n' | timeout 6 nc -w 3 ${address} 80 2>&1; true`;
/** A request through the proxy named by HTTP_PROXY (as the exec sees it now), its answer printed. */
const viaProxy = (host: string, path: string): string =>
  `${HELPERS}\ncd /tmp; req r "GET http://${host}${path}" ${host}; cat out-r; rm -f out-r`;

const PROBES = {
  setup: { direct_allowed: direct(ALLOWED, '/setup', 'allowed.test'), proxy: 'printf "[%s]" "$HTTP_PROXY"' },
  agent: {
    proxy_allowed: viaProxy('allowed.test', '/agent'),
    proxy_other: viaProxy('other.test', '/agent'),
    direct_allowed: direct(ALLOWED, '/agent-direct', 'allowed.test'),
  },
};
const VERIFIER = `{ ${direct(OTHER, '/verifier', 'verifier')}; } > /logs/verifier/direct.txt`;

interface Phase {
  readonly session: string;
  readonly egress: unknown;
  readonly answers: Record<string, { rc: number; stdout: string; stderr: string }>;
}
interface Outcome {
  readonly probes: { setup?: Phase; agent?: Phase };
  readonly exception: string | null;
  readonly reward: number | null;
  readonly verifier: Record<string, string>;
  readonly seconds: Record<string, number>;
  readonly trial_seconds: number | null;
}

describe.skipIf(problem !== null)(
  'Harbor Trial: set-up phase open, agent phase allowlisted (issue 42)',
  () => {
    let world: EgressWorld;
    let serve: RunningServe;

    beforeAll(async () => {
      if (namespaceProblem !== null) throw new Error(`REQUIRE_DOCKER=1 but: ${namespaceProblem}`);
      world = await startEgressWorld('hbeg', [DRIVER_IMAGE, IMAGE]);
      serve = await startServe({
        socketPath: join(world.work, 'serve.sock'),
        dataDir: join(world.work, 'data'),
        registryPath: join(world.work, 'registry.db'),
        bindAddress: '0.0.0.0',
        environment: {},
        allowEnv: [],
        version: 'test',
        logger: fakeLogger(),
        runtime: world.runtime,
        egress: world.gate,
      });
    }, 240_000);

    afterAll(async () => {
      await serve?.shutdown();
      await world?.dispose();
    }, 120_000);

    it("Trial.run switches the session open → allowlist [allowed.test] → open at Harbor's phase boundaries", async () => {
      const { stdout } = await exec(PYTHON, [SCRIPT], {
        env: {
          ...process.env,
          ROBOGUIDE_EVAL_SOCKET: serve.socketPath,
          RG_IMAGE: IMAGE,
          RG_ALLOWED_HOSTS: JSON.stringify(['allowed.test']),
          RG_PROBES: JSON.stringify(PROBES),
          RG_VERIFIER: VERIFIER,
        },
        maxBuffer: 64 * 1024 * 1024,
        timeout: 900_000,
      });
      const out = JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}') as Outcome;
      if (out.exception !== null) console.error(JSON.stringify(out, null, 1));
      console.info(`Harbor trial phases (s): ${JSON.stringify(out.seconds)}, trial ${out.trial_seconds} s`);
      expect(out.exception).toBeNull();
      expect(out.reward).toBe(1);
      const { setup, agent } = out.probes;
      expect(agent?.session).toBe(setup?.session);

      // Set-up phase (the environment's baseline, public): open, no proxy, a direct connection arrives.
      expect(setup?.egress).toEqual({ mode: 'open' });
      expect(setup?.answers['proxy']?.stdout).toBe('[]');
      expect(setup?.answers['direct_allowed']?.stdout).toContain(`upstream ${ALLOWED} GET allowed.test`);

      // Agent phase (Harbor's set_network_policy with the task's NetworkPolicy): the allowed name through the proxy;
      // another host refused by the proxy; the allowed host's own address without the proxy reaches nothing.
      expect(agent?.egress).toEqual({ mode: 'allowlist', allow: ['allowed.test'] });
      expect(agent?.answers['proxy_allowed']?.stdout).toContain(`upstream ${ALLOWED} GET allowed.test`);
      expect(agent?.answers['proxy_other']?.stdout).toMatch(/^HTTP\/1\.1 403/);
      expect(agent?.answers['direct_allowed']?.stdout).not.toContain('upstream');

      // Verifier phase: back at the baseline (open), a direct connection to another host arrives.
      expect(out.verifier['direct.txt']).toContain(`upstream ${OTHER} GET verifier`);

      // What reached the internet: the set-up's direct request, the agent's allowed request, the verifier's.
      const upstream = (await world.upstream()).filter((l) => l.startsWith('request '));
      expect(upstream.map((l) => l.split(' ').slice(0, 5).join(' '))).toEqual([
        `request ${ALLOWED}:80 GET allowed.test /setup`,
        `request ${ALLOWED}:80 GET allowed.test /agent`,
        `request ${OTHER}:80 GET verifier /verifier`,
      ]);

      // Harbor's stop deleted the session; its evidence holds the agent phase's attempts, the refused ones included.
      const id = setup?.session ?? '';
      const records = (await readFile(join(serve.dataDir, 'sessions', id, 'egress.jsonl'), 'utf8'))
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as EgressRecord);
      const pick = (r: EgressRecord) => [r.via, r.host ?? r.address, r.decision, r.reason ?? null];
      expect(records.map(pick)).toEqual(
        expect.arrayContaining([
          ['http', 'allowed.test', 'allowed', null],
          ['http', 'other.test', 'refused', 'host_not_allowed'],
        ]),
      );
      expect(
        records.filter((r) => r.via === 'tcp' && r.decision === 'refused').map((r) => r.address),
      ).toContain(ALLOWED);
    }, 900_000);
  },
);
