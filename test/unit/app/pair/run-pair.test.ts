/**
 * `pair run` with fakes behind every port (no engine, no /proc): the claim it publishes, the slot it takes and gives
 * back, and the refusals that must leave nothing behind.
 */
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SqliteCapacityRegistry } from '../../../../src/adapters/registry/sqlite-capacity-registry.js';
import type { AdmitRefusal } from '../../../../src/core/admission-rule.js';
import { fakeRegistry } from '../../../support/fakes.js';
import { runPair } from '../../../../src/app/pair/run-pair.js';
import type { RunPairDeps, RunPairOptions } from '../../../../src/app/pair/run-pair-types.js';
import { RoboguideError } from '../../../../src/core/errors.js';
import type { Receipt } from '../../../../src/core/receipt.js';
import { FakeHost, FakePairRuntime, fakeExecuteDeps, SUPERVISOR } from '../../../support/fake-pair-world.js';

let dir: string;
let registry: SqliteCapacityRegistry;
let runtime: FakePairRuntime;
let opened: number;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-run-pair-'));
  registry = SqliteCapacityRegistry.open({ path: join(dir, 'registry.db') });
  runtime = new FakePairRuntime();
  opened = 0;
});
afterEach(async () => {
  await registry.close();
  await rm(dir, { recursive: true, force: true });
});

function deps(overrides: Partial<RunPairDeps> = {}): RunPairDeps {
  return {
    ...fakeExecuteDeps(runtime, new FakeHost()),
    registry: () => {
      opened++;
      return Promise.resolve(registry);
    },
    ...overrides,
  };
}

function options(spec: Record<string, unknown> = {}, extra: Partial<RunPairOptions> = {}): RunPairOptions {
  const full = {
    job_id: 'j1',
    image: 'driver:1',
    argv: ['/run'],
    cwd: join(dir, 'cwd'),
    outcome_path: join(dir, 'out', 'j1.json'),
    timeout_seconds: 60,
    ...spec,
  };
  return {
    specText: JSON.stringify(full),
    specSource: 'spec.json',
    output: join(dir, 'D'),
    bindAddress: '127.0.0.1',
    environment: {},
    codeVersion: 'test',
    cwd: dir,
    ...extra,
  };
}

async function held(): Promise<number> {
  return (await registry.held()).filter((r) => r.batchId !== 'other').length;
}

async function refusal(run: Promise<unknown>): Promise<RoboguideError> {
  const err: unknown = await run.catch((e: unknown) => e);
  if (!(err instanceof RoboguideError)) throw new Error(`expected a RoboguideError, got ${String(err)}`);
  return err;
}

describe('runPair', () => {
  it('claims with the host identity, runs, writes result.json and gives the slot back through reconciliation', async () => {
    const outcome = await runPair(deps(), options());
    const receipt = JSON.parse(await readFile(join(dir, 'D', 'receipt.json'), 'utf8')) as Receipt;
    expect(receipt.supervisor).toEqual(SUPERVISOR);
    expect(receipt.host_boot_id).toBe(SUPERVISOR.boot_id);
    expect(receipt.batch_id).toBe(`pair-run-${receipt.claim_id.slice(0, 8)}`);
    expect(receipt.private_outcome).toBe('outcome/j1.json');
    expect(receipt.container_id).toBe(outcome.result.container.id);
    expect(outcome.result.classification).toBe('completed');
    expect(outcome.result.outcome_sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(outcome.reconciliation.kind).toBe('committed');
    expect(await held()).toBe(0);
    expect(runtime.containers.size).toBe(0);
  });

  it('refuses an outcome_path that already holds something, even a dangling symlink, before the registry or the engine', async () => {
    await mkdir(join(dir, 'out'), { recursive: true });
    await symlink(join(dir, 'nowhere'), join(dir, 'out', 'j1.json'));
    const err = await refusal(runPair(deps(), options()));
    expect(err.code).toBe('E_SPEC_INVALID');
    expect(err.message).toContain('outcome_path: already exists');
    expect(opened).toBe(0);
    expect(runtime.created).toBe(0);
    expect(existsSync(join(dir, 'D'))).toBe(false);
  });

  it('a missing image is exit 2, naming the job and the fix, before the registry is opened or anything written', async () => {
    const err = await refusal(runPair(deps(), options({ image: 'absent:1' })));
    expect([err.code, err.exitCode]).toEqual(['E_IMAGE_MISSING', 2]);
    expect(err.message).toMatch(/^image absent:1 is not present on this engine \(needed by job \S+\)$/);
    expect(err.suggestions[0]).toBe(
      'get it onto this engine: `docker build -t absent:1 <folder with its Dockerfile>`, `docker pull absent:1` or `docker load -i <file>`',
    );
    expect(opened).toBe(0);
    expect(existsSync(join(dir, 'D'))).toBe(false);
  });

  it("the image's inspect runs beside the path checks, but a spec's own fault is still the one reported (issue 39)", async () => {
    await mkdir(join(dir, 'out'), { recursive: true });
    await writeFile(join(dir, 'out', 'j1.json'), 'earlier');
    // Missing image and a path fault: the path fault.
    const missing = await refusal(runPair(deps(), options({ image: 'absent:1' })));
    expect(missing.code).toBe('E_SPEC_INVALID');
    // An engine that does not answer the inspect (its rejection is not left unhandled): still the path fault.
    const asked: string[] = [];
    runtime.imageExists = (image: string) => {
      asked.push(image);
      return Promise.reject(new Error('engine gone'));
    };
    const down = await refusal(runPair(deps(), options()));
    expect(down.code).toBe('E_SPEC_INVALID');
    expect(down.message).toContain('outcome_path: already exists');
    expect(asked).toEqual(['driver:1']);
    expect([opened, runtime.created]).toEqual([0, 0]);
    expect(existsSync(join(dir, 'D'))).toBe(false);
  });

  it("the pair's network is prepared (the guard's listing begun) beside the checks, before the claim; never for a refused spec's create", async () => {
    const seen: { choice: string; opened: number; created: number }[] = [];
    const preparing = Object.assign(runtime, {
      prepareNetwork: (choice: string) => seen.push({ choice, opened, created: runtime.created }),
    });
    await runPair(deps({ runtime: preparing }), options());
    await runPair(
      deps({ runtime: preparing }),
      options({ job_id: 'j2', network: 'none' }, { output: join(dir, 'E') }),
    );
    expect(seen).toEqual([
      { choice: 'bridge', opened: 0, created: 0 },
      { choice: 'none', opened: 1, created: 1 },
    ]);
    expect(runtime.created).toBe(2);
  });

  it('a spec refused by its checks lists nothing (the firewall is not touched for it)', async () => {
    const seen: string[] = [];
    const preparing = Object.assign(runtime, { prepareNetwork: (choice: string) => seen.push(choice) });
    await mkdir(join(dir, 'out'), { recursive: true });
    await writeFile(join(dir, 'out', 'j1.json'), 'earlier');
    expect((await refusal(runPair(deps({ runtime: preparing }), options()))).code).toBe('E_SPEC_INVALID');
    expect((await refusal(runPair(deps({ runtime: preparing }), options({ image: 'absent:1' })))).code).toBe(
      'E_SPEC_INVALID',
    );
    expect(seen).toEqual([]);
  });

  it('a full host refuses with E_CAPACITY and writes nothing', async () => {
    await registry.setLimits({ maxReservations: 1, gpuMib: null });
    const first = await registry.admit({ batchId: 'other', jobId: 'x', claimId: 'c-other', gpuMib: 0 });
    expect(first.kind).toBe('admitted');
    const err = await refusal(runPair(deps(), options()));
    expect(err.code).toBe('E_CAPACITY');
    expect(err.message).toContain('capacity limit');
    expect(existsSync(join(dir, 'D'))).toBe(false);
  });

  it('an engine fault at create: the pair is an infrastructure failure with the fault kept, and its slot is given back', async () => {
    runtime.failCreate = Object.assign(new Error('engine refused'), { statusCode: 500 });
    const r = await runPair(deps(), options());
    expect(r.result.classification).toBe('infrastructure_failure');
    expect(r.result.container.id).toBeNull();
    expect(r.result.engine_error).not.toBeNull();
    expect(r.reconciliation.kind).toBe('committed');
    expect(await held()).toBe(0);
  });

  it('a launch that fails before any container (mount rules unreadable): the error, and the slot given back first', async () => {
    const err: unknown = await runPair(
      deps({ hostMountRules: () => Promise.reject(new Error('engine data root unreadable')) }),
      options(),
    ).catch((e: unknown) => e);
    expect(String(err)).toContain('engine data root unreadable');
    expect(runtime.created).toBe(0);
    // The claim stands (its receipt names no container) but nobody would finish it: the release rule frees the slot.
    expect(existsSync(join(dir, 'D', 'receipt.json'))).toBe(true);
    expect(await held()).toBe(0);
  });

  it('an output directory left by an earlier run (not empty) refuses and gives the slot back', async () => {
    await mkdir(join(dir, 'D'));
    await writeFile(join(dir, 'D', 'receipt.json'), '{}');
    const err = await refusal(runPair(deps(), options()));
    expect(err.code).toBe('E_OUTPUT_NOT_EMPTY');
    expect(await held()).toBe(0);
    expect(runtime.created).toBe(0);
  });
});

describe('runPair: refusals before anything runs, and the options', () => {
  /** A registry that refuses every admission with `refusal`, and counts what it was asked. */
  function refusingRegistry(refusal: Omit<AdmitRefusal, 'kind'>): {
    registry: RunPairDeps['registry'];
    admits: () => number;
  } {
    let admits = 0;
    const fake = fakeRegistry({
      localNode: 'here',
      admit: () => {
        admits++;
        return Promise.resolve({ kind: 'refused', ...refusal });
      },
    });
    return { registry: fake, admits: () => admits };
  }

  it('a spec that is not JSON is refused without quoting it; one that is JSON but not a spec names its problems', async () => {
    const notJson = await refusal(runPair(deps(), { ...options(), specText: '{"job_id": "sk-secret-value' }));
    expect(notJson.code).toBe('E_SPEC_INVALID');
    expect(JSON.stringify(notJson)).not.toContain('sk-secret-value');
    const notSpec = await refusal(runPair(deps(), options({ argv: 'not-a-list' })));
    expect(notSpec.code).toBe('E_SPEC_INVALID');
    expect(opened).toBe(0);
  });

  it('a variable the spec references and the environment lacks is E_ENV_MISSING before the registry', async () => {
    const err = await refusal(runPair(deps(), options({ environment: { API_KEY: '${API_KEY}' } })));
    expect(err.code).toBe('E_ENV_MISSING');
    expect(opened).toBe(0);
  });

  it("a bind address that is not one of the host's is refused at --bind-address", async () => {
    const err = await refusal(
      runPair(deps(), options({}, { bindAddress: '10.9.9.9', hostAddresses: ['127.0.0.1', '192.168.1.5'] })),
    );
    expect(err.code).toBe('E_SPEC_INVALID');
    expect(JSON.stringify(err)).toContain('--bind-address');
    expect(opened).toBe(0);
  });

  it('a port held by another batch names the port and its holder; unknown ones show as ?', async () => {
    const named = refusingRegistry({
      reason: 'port_held',
      held: 1,
      limit: 1,
      port: 8080,
      node: 'here',
      holderBatchId: 'b-7',
    });
    const err = await refusal(runPair(deps({ registry: named.registry }), options()));
    expect(err.code).toBe('E_REGISTRY');
    expect(err.message).toBe('port 8080 is held on node here by batch b-7: not started');
    const unnamed = refusingRegistry({ reason: 'port_held', held: 1, limit: 1, node: 'here' });
    const err2 = await refusal(runPair(deps({ registry: unnamed.registry }), options()));
    expect(err2.message).toBe('port ? is held on node here by batch ?: not started');
    expect(existsSync(join(dir, 'D'))).toBe(false);
  });

  it('a host at its GPU budget says so in MiB', async () => {
    const full = refusingRegistry({ reason: 'gpu_budget', held: 30000, limit: 32000, node: 'here' });
    const err = await refusal(runPair(deps({ registry: full.registry }), options()));
    expect(err.message).toContain('GPU budget (30000 of 32000 MiB held)');
    expect(full.admits()).toBe(1);
    expect(runtime.created).toBe(0);
  });

  it('a code version given as a function that fails is reported after the engine checks, before a slot is taken', async () => {
    const err: unknown = await runPair(
      deps(),
      options({}, { codeVersion: () => Promise.reject(new Error('git describe failed')) }),
    ).catch((e: unknown) => e);
    expect(String(err)).toContain('git describe failed');
    expect(opened).toBe(0);
  });

  it("the code version is asked as soon as the spec parsed, beside the path checks and the engine's questions, not after them (issue 39)", async () => {
    const order: string[] = [];
    const outcome = await runPair(
      deps(),
      options(
        {},
        {
          codeVersion: () => {
            order.push('code version');
            return Promise.resolve('v-early');
          },
          hostPaths: () => {
            order.push('host paths');
            return Promise.resolve({});
          },
        },
      ),
    );
    expect(order).toEqual(['code version', 'host paths']);
    expect(outcome.receipt.code_version).toBe('v-early');
    // A spec that does not parse asks nothing.
    order.length = 0;
    const bad = await refusal(
      runPair(deps(), {
        ...options({}, { codeVersion: () => (order.push('code version'), Promise.resolve('x')) }),
        specText: '{',
      }),
    );
    expect(bad.code).toBe('E_SPEC_INVALID');
    expect(order).toEqual([]);
  });

  it('with a registry given as an object, no --output and a code version function: evidence goes to a stamped directory under cwd', async () => {
    const extra: Partial<RunPairOptions> = { codeVersion: () => Promise.resolve('v-fn') };
    const { output: _drop, ...rest } = options({}, extra);
    const outcome = await runPair(deps({ registry }), rest);
    expect(outcome.output).toMatch(new RegExp(`^${dir}/roboguide-pair-j1-\\d{8}T\\d{6}$`));
    expect(outcome.receipt.code_version).toBe('v-fn');
    expect(outcome.reconciliation.kind).toBe('committed');
    expect(await held()).toBe(0);
  });

  it('a short secret accepted with allowShortSecrets is named in a warning', async () => {
    const warnings: string[] = [];
    const outcome = await runPair(
      deps(),
      options(
        { environment: { API_KEY: '${API_KEY}' } },
        { environment: { API_KEY: 'abc' }, allowShortSecrets: true, onWarning: (w) => warnings.push(w) },
      ),
    );
    expect(warnings.length).toBe(1);
    expect(warnings[0]).toContain('API_KEY');
    expect(warnings[0]).not.toContain('abc');
    expect(outcome.result.classification).toBe('completed');
  });
});
