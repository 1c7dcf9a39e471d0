import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { prepareBatch } from '../../src/app/batch/start-batch.js';
import { supervise } from '../../src/app/batch/supervisor.js';
import type { ExecutePairDeps } from '../../src/app/pair/execute-pair-types.js';
import { systemClock } from '../../src/adapters/system-clock.js';
import type { ContainerRuntime, RemoveResult } from '../../src/app/ports/container-runtime.js';
import { silentLogger } from '../../src/app/ports/logger.js';
import { createExecutePairDeps } from '../../src/composition-root.js';
import { DRIVER_IMAGE, noDocker, runtime, sweep } from '../support/docker.js';
import { procHostIdentity } from '../../src/adapters/host-identity.js';

/** The real engine, except that remove does nothing: the container stays, as when a removal silently fails. */
class NoOpRemoveRuntime {
  static wrap(inner: ContainerRuntime): ContainerRuntime {
    return new Proxy(inner, {
      get(target, prop, receiver) {
        if (prop === 'remove') return (): Promise<RemoveResult> => Promise.resolve('removed');
        const value: unknown = Reflect.get(target, prop, receiver);
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
  }
}

class DiagnosisExploded extends Error {}

const BIN = fileURLToPath(new URL('../../bin/run.js', import.meta.url));

function reconcileCli(output: string) {
  const r = spawnSync(
    process.execPath,
    [BIN, 'reconcile', '--output', output, '--registry', registryPath, '--execute'],
    { encoding: 'utf8' },
  );
  return { code: r.status, stdout: r.stdout + r.stderr };
}

async function reservationState(claimId: string): Promise<string | undefined> {
  const registry = SqliteCapacityRegistry.open({ path: registryPath });
  try {
    return (await registry.reservationForClaim(claimId))?.state;
  } finally {
    registry.closeSync();
  }
}

const rt = runtime();
let work: string;
let registryPath: string;

async function runOne(name: string, actions: string[], execute: ExecutePairDeps) {
  const manifest = {
    schema: 'roboguide.e1.batch/v0.1',
    image: DRIVER_IMAGE,
    jobs: [
      {
        job_id: name,
        argv: ['/opt/driver/run', ...actions],
        cwd: join(work, name),
        outcome_path: join(work, name, 'out', 'out.json'),
        timeout_seconds: 60,
      },
    ],
    stop_budget_seconds: 2,
  };
  const path = join(work, `${name}.json`);
  await writeFile(path, JSON.stringify(manifest));
  const output = join(work, `${name}-batch`);
  const batch = await prepareBatch(
    { fs: new NodeFileSystem(), host: procHostIdentity, runtime: rt, clock: systemClock },
    {
      manifestPath: path,
      output,
      registryPath,
      bindAddress: '127.0.0.1',
      environment: {},
      codeVersion: 'test',
    },
  );
  const store = new EvidenceStore(new NodeFileSystem(), output);
  const registry = SqliteCapacityRegistry.open({ path: registryPath });
  try {
    const state = await supervise(
      { store, registry, execute, logger: silentLogger, environment: {}, handleSignals: false },
      'start',
    );
    const result = JSON.parse(await readFile(join(output, 'jobs', name, 'result.json'), 'utf8'));
    const reservation = await registry.reservationForClaim(result.claim_id);
    return { state, result, reservation, batchId: batch.batch_id };
  } finally {
    registry.closeSync();
  }
}

describe.skipIf(noDocker)('provider diagnosis never prevents the cleanup', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-diag-'));
    registryPath = join(work, 'registry.db');
  });
  afterAll(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it('a 429 session is diagnosed, and the container is gone and the slot released', async () => {
    const { result, reservation } = await runOne(
      'd-429',
      ['session=429', 'outcome=completed'],
      createExecutePairDeps(rt, silentLogger),
    );
    expect(result.provider_failure).toEqual({
      schema: 'roboguide.provider_failure/v1',
      kind: 'response_too_many_failed_attempts',
      http_status: 429,
    });
    expect(result.classification).toBe('completed'); // a hint, never a verdict
    expect(await rt.inspect(result.container.id)).toBeNull();
    expect(reservation?.state).toBe('released');
  });

  it('a session with payload.type [] is skipped: container removed, slot released', async () => {
    const { result, reservation } = await runOne(
      'd-shape',
      ['session=payload_type_array', 'outcome=completed'],
      createExecutePairDeps(rt, silentLogger),
    );
    expect(result.provider_failure).toBeNull();
    expect(result.provider_failure_error_kind).toBeNull();
    expect(await rt.inspect(result.container.id)).toBeNull();
    expect(reservation?.state).toBe('released');
  });

  it('a diagnosis that throws is recorded by its class name only; the container is still removed', async () => {
    const execute = {
      ...createExecutePairDeps(rt, silentLogger),
      diagnose: () => Promise.reject(new DiagnosisExploded('secret text')),
    };
    const { result, reservation } = await runOne('d-throw', ['session=429', 'outcome=completed'], execute);
    expect(result.provider_failure).toBeNull();
    expect(result.provider_failure_error_kind).toBe('DiagnosisExploded');
    expect(JSON.stringify(result)).not.toContain('secret text');
    expect(await rt.inspect(result.container.id)).toBeNull();
    expect(reservation?.state).toBe('released');
  });

  it('a removal that does not take effect keeps the reservation until reconcile sees the container gone', async () => {
    const execute = {
      ...createExecutePairDeps(NoOpRemoveRuntime.wrap(rt), silentLogger),
      verifyAbsentTimeoutMs: 900,
    };
    const { state, result, reservation, batchId } = await runOne('d-noop', ['outcome=completed'], execute);
    try {
      expect(result.classification).toBe('harness_failure');
      expect(result.reasons).toContain('cleanup_unverified');
      expect(result.cleanup.verified_absent).toBe(false);
      expect(await rt.inspect(result.container.id)).not.toBeNull();
      expect(reservation?.state).toBe('held');
      expect(state).toBe('drained');

      // reconcile refuses while the container exists, keeping the slot…
      const output = join(work, 'd-noop-batch');
      const refused = reconcileCli(output);
      expect(refused.code).toBe(1);
      expect(refused.stdout).toMatch(/container/i);
      expect(await reservationState(result.claim_id)).toBe('held');
      // …and, once a person removed it, releases the original slot exactly once.
      await sweep({ 'roboguide.batch': batchId });
      expect(reconcileCli(output).code).toBe(0);
      expect(await reservationState(result.claim_id)).toBe('released');
      expect(reconcileCli(output).code).toBe(0); // replay: already committed, nothing released twice
      expect(await reservationState(result.claim_id)).toBe('released');
    } finally {
      await sweep({ 'roboguide.batch': batchId });
    }
  });
});
