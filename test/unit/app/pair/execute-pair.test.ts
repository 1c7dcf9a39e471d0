import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../../../src/adapters/fs/node-file-system.js';
import { EvidenceStore } from '../../../../src/app/evidence/evidence-store.js';
import { executePair } from '../../../../src/app/pair/execute-pair.js';
import type { ExecutePairDeps, ExecutePairInput } from '../../../../src/app/pair/execute-pair-types.js';
import type { DiskUsage } from '../../../../src/app/ports/disk-usage.js';
import type { FileSystem } from '../../../../src/app/ports/file-system.js';
import { silentLogger } from '../../../../src/app/ports/logger.js';
import { B1_PORT_VARIABLES } from '../../../../src/core/b1-config.js';
import { fakeTime } from '../../../support/fake-time.js';
import { FaultyFileSystem } from '../../../support/faulty-file-system.js';
import { engineError, ScriptedRuntime, state } from '../../../support/scripted-runtime.js';
import { fileOutcomeReader } from '../../../../src/adapters/outcome-reader.js';
import { procHostIdentity } from '../../../../src/adapters/host-identity.js';

const T0 = Date.parse('2026-12-03T08:00:00Z');
const DEADLINE = T0 + 90_000;
const SECRET = 'sk-live-0123456789abcdef';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-execute-pair-'));
  await mkdir(join(dir, 'D'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

function deps(runtime: ScriptedRuntime): ExecutePairDeps {
  const time = fakeTime('2026-12-03T08:00:00Z');
  return {
    runtime: runtime,
    clock: {
      ...time.clock,
      // Fake time, but each wait also yields real time (a twentieth, at most 50 ms): the log drain judges a stall by
      // the fake clock, and on a loaded machine the streams' real I/O (pipe, fsync) must get real time before ten
      // fake seconds pass (else a pair reads as log_incomplete: 1-4 of these tests failed at load 20+).
      sleep: async (ms, signal) => {
        await new Promise((resolve) => setTimeout(resolve, Math.min(50, ms / 20)));
        return time.sleep(ms, signal);
      },
    },
    logger: silentLogger,
    createRedactor: () => new PassThrough(),
    extractSessions: () => Promise.reject(new Error('no sessions archive in these tests')),
    diagnose: () => Promise.resolve(null),
    verifyAbsentTimeoutMs: 300,
    fs: new NodeFileSystem(),
    host: procHostIdentity,
    outcomes: fileOutcomeReader,
  };
}

function input(
  extra: Partial<ExecutePairInput> = {},
  fs: FileSystem = new NodeFileSystem(),
): ExecutePairInput {
  return {
    store: new EvidenceStore(fs, join(dir, 'D')),
    jobRel: 'jobs/p1',
    batchId: 'batch-1',
    claimId: 'claim-0001',
    job: {
      job_id: 'p1',
      argv: ['/run'],
      cwd: join(dir, 'cwd'),
      outcome_path: join(dir, 'out', 'o.json'),
      ports: [],
      image: 'img',
    },
    environment: {},
    secrets: [SECRET],
    sessionsDir: '/root/.codex/sessions',
    stopBudgetSec: 5,
    bindAddress: '127.0.0.1',
    allowedHttpStatuses: [],
    deadlineMs: DEADLINE,
    readOutcome: () => Promise.resolve({ state: 'missing' }),
    ...extra,
  };
}

const log = (name: string): Promise<string> => readFile(join(dir, 'D', 'jobs', 'p1', name), 'utf8');

describe('executePair with a scripted engine', () => {
  it('a pair that exits: logs on disk, the wait bounded by the claim deadline, the container removed and verified', async () => {
    const runtime = new ScriptedRuntime();
    const { result } = await executePair(deps(runtime), input());
    expect(runtime.waitDeadlines).toEqual([DEADLINE]);
    expect(await log('stdout.log')).toBe('out\n');
    expect(result).toMatchObject({
      classification: 'infrastructure_failure',
      reasons: ['outcome_missing'],
      container: { id: 'c1', exit_code: 0, timed_out: false },
    });
    expect(result.cleanup).toEqual({ removed: true, verified_absent: true, attempts: 1 });
    expect(result.started_at).toBe('2026-12-03T08:00:00.000Z');
    expect(runtime.created?.labels).toEqual({
      'roboguide.batch': 'batch-1',
      'roboguide.job': 'p1',
      'roboguide.claim': 'claim-0001',
    });
  });

  it('at its deadline: the controlled stop with the stop budget, timed out, still removed', async () => {
    const runtime = new ScriptedRuntime();
    runtime.waits = [{ kind: 'deadline' }];
    runtime.inspects = [state('exited', 137)];
    const { result } = await executePair(deps(runtime), input());
    expect(runtime.stops).toEqual([{ id: 'c1', timeoutSec: 5 }]);
    expect(result.reasons).toEqual(['timeout', 'outcome_missing']);
    expect(result.container).toEqual({ id: 'c1', exit_code: 137, timed_out: true, oom_killed: false });
    expect(runtime.calls.at(-1)).toBe('remove');
  });

  it('on terminate: the controlled stop, terminated', async () => {
    const runtime = new ScriptedRuntime();
    runtime.waits = ['until_signal'];
    const terminate = new AbortController();
    terminate.abort();
    const { result } = await executePair(deps(runtime), input({ terminate: terminate.signal }));
    expect(runtime.stops).toHaveLength(1);
    expect(result.reasons).toEqual(['terminated', 'outcome_missing']);
    expect(result.container.timed_out).toBe(false);
  });

  it('a log past its cap stops the pair: log_limit_exceeded, the file is the cap plus a marker', async () => {
    const runtime = new ScriptedRuntime();
    runtime.waits = ['until_signal'];
    runtime.output = 'x'.repeat(200_000);
    const pair = input();
    const { result, execution } = await executePair(deps(runtime), {
      ...pair,
      job: { ...pair.job, log_limit_bytes: 65_536 },
    });
    expect(execution.logLimitExceeded).toBe('stdout');
    expect(result.reasons).toEqual(['log_limit_exceeded', 'outcome_missing']);
    expect(result.logs.stdout.limit_exceeded).toBe(true);
    expect((await log('stdout.log')).startsWith('x'.repeat(65_536))).toBe(true);
    expect(runtime.stops).toHaveLength(1);
  });

  it('a pair past its disk limit is stopped the controlled way: disk_limit_exceeded, and the limits are recorded', async () => {
    const runtime = new ScriptedRuntime();
    runtime.waits = ['until_signal'];
    const walked: (readonly string[])[] = [];
    const disk: DiskUsage = {
      measure: (paths) => {
        walked.push(paths);
        // The baseline (before the pair runs) is empty; then the pair has written 5 MiB.
        return Promise.resolve({ bytes: walked.length === 1 ? 0 : 5 * 2 ** 20, entries: 10, complete: true });
      },
    };
    const pair = input({ limits: { pids_limit: 64, memory_mib: 128, cpus: 0.5, disk_limit_bytes: 2 ** 20 } });
    const { result } = await executePair({ ...deps(runtime), disk, diskPollIntervalMs: 10 }, pair);
    expect(runtime.stops).toHaveLength(1);
    expect(result.reasons).toEqual(['disk_limit_exceeded', 'outcome_missing']);
    expect(result.classification).toBe('infrastructure_failure');
    expect(result.limits).toEqual({ pids_limit: 64, memory_mib: 128, cpus: 0.5, disk_limit_bytes: 2 ** 20 });
    expect(result.disk).toMatchObject({ limit_bytes: 2 ** 20, exceeded: true, peak_bytes: 5 * 2 ** 20 });
    expect(walked[0]).toEqual([pair.job.cwd, join(dir, 'D', 'jobs', 'p1', 'outcome')]);
    // What the engine was asked for: the limits in its words, swap equal to memory.
    expect(runtime.created?.limits).toMatchObject({
      pidsLimit: 64,
      memoryBytes: 128 * 2 ** 20,
      memorySwapBytes: 128 * 2 ** 20,
      nanoCpus: 500_000_000,
    });
  });

  it('an OOM kill seen at collection is recorded and classified oom_killed', async () => {
    const runtime = new ScriptedRuntime();
    runtime.waits = [{ kind: 'exited', exitCode: 137 }];
    runtime.inspects = [{ ...state('exited', 137), oomKilled: true }];
    const { result } = await executePair(deps(runtime), input());
    expect(result.container.oom_killed).toBe(true);
    expect(result.reasons).toEqual(['oom_killed', 'outcome_missing']);
  });

  it('a log that cannot be written stops the pair as a harness fault, and the container is still removed', async () => {
    const runtime = new ScriptedRuntime();
    runtime.waits = ['until_signal'];
    const fs = new FaultyFileSystem(new NodeFileSystem(), {
      rules: [{ op: 'write', path: 'stdout.log', code: 'ENOSPC' }],
    });
    const { result } = await executePair(deps(runtime), input({}, fs));
    expect(result.classification).toBe('harness_failure');
    expect(result.reasons).toContain('log_write_failed');
    expect(runtime.stops).toHaveLength(1);
    expect(result.cleanup.verified_absent).toBe(true);
  });

  it('an engine lost during the wait and back with the container stopped: engine_restarted, logs read again without duplicates', async () => {
    const runtime = new ScriptedRuntime();
    runtime.waits = [{ kind: 'engine_lost', lastSeenAliveMs: T0 }];
    runtime.inspects = ['refused', 'refused', state('exited', 143, '2026-12-03T08:00:30Z')];
    const { result } = await executePair(deps(runtime), input());
    expect(result.reasons).toEqual(['engine_restarted', 'outcome_missing']);
    expect(result.engine_error?.message).toMatch(/stopped at 2026-12-03T08:00:30Z \(exit code 143\)/);
    expect(runtime.calls).toContain('follow');
    expect(await log('stdout.log')).toBe('out\n');
    expect(result.cleanup.verified_absent).toBe(true);
  });

  it('an engine lost during the wait whose container survived: waited for again until its ordinary exit', async () => {
    const runtime = new ScriptedRuntime();
    runtime.waits = [
      { kind: 'engine_lost', lastSeenAliveMs: T0 },
      { kind: 'exited', exitCode: 0 },
    ];
    runtime.inspects = ['refused', state('running', null), state('exited', 0)];
    const { result } = await executePair(deps(runtime), input());
    expect(runtime.waitDeadlines).toEqual([DEADLINE, DEADLINE]);
    expect(result.reasons).toEqual(['outcome_missing']);
    expect(result.engine_error).toBeNull();
  });

  it('a removal that does not take effect: cleanup_unverified, a harness failure (the slot stays held)', async () => {
    const runtime = new ScriptedRuntime();
    runtime.removeTakesNoEffect = true;
    const { result } = await executePair(deps(runtime), input());
    expect(result.cleanup).toEqual({ removed: true, verified_absent: false, attempts: 3 });
    expect(result.classification).toBe('harness_failure');
    expect(result.reasons).toContain('cleanup_unverified');
  });

  it('an image missing at create: image_missing, no container to stop or remove, the engine words masked', async () => {
    const runtime = new ScriptedRuntime();
    runtime.createAnswer = engineError('image_missing', 404, `No such image: img (token ${SECRET})`);
    const { result } = await executePair(deps(runtime), input());
    expect(result.reasons).toEqual(['image_missing', 'outcome_missing']);
    expect(result.container.id).toBeNull();
    expect(runtime.calls).toEqual(['create']);
    expect(result.engine_error?.kind).toBe('image_missing');
    expect(result.engine_error?.message).not.toContain(SECRET);
    expect(result.logs).toEqual({ stdout: { bytes: 0, closed: true }, stderr: { bytes: 0, closed: true } });
  });

  it('a port already allocated at start: port_allocated, and the created container is removed', async () => {
    const runtime = new ScriptedRuntime();
    runtime.startAnswer = engineError(
      'port_allocated',
      500,
      'Bind for 127.0.0.1:8080 failed: port is already allocated',
    );
    runtime.inspects = [state('created', null)];
    const { result } = await executePair(deps(runtime), input());
    expect(result.reasons).toEqual(['port_allocated', 'outcome_missing']);
    expect(runtime.calls).toContain('remove');
    expect(result.cleanup.verified_absent).toBe(true);
  });

  it('an engine that stops answering mid-wait is the engine_error reason; result.json keeps the fault word engine_unavailable', async () => {
    const runtime = new ScriptedRuntime();
    runtime.waits = [engineError('engine_unavailable', null)];
    const { result } = await executePair(deps(runtime), input());
    expect(result.reasons).toEqual(['engine_error', 'outcome_missing']);
    expect(result.engine_error?.kind).toBe('engine_unavailable');
  });

  it('a lost node leaves the removal unverified without a harness fault (the node is at fault)', async () => {
    const runtime = new ScriptedRuntime();
    runtime.waits = [{ kind: 'node_lost', node: 'n2', message: 'node n2 was lost' }];
    runtime.inspects = ['refused'];
    const { result } = await executePair(deps(runtime), input());
    expect(result.reasons).toEqual(['node_lost', 'outcome_missing']);
    expect(result.classification).toBe('infrastructure_failure');
    expect(result.cleanup.verified_absent).toBe(false);
  });

  it('a reattach (resume) to a container an unwatched engine restart stopped: engine_restarted, history read from the claim, no wait', async () => {
    const runtime = new ScriptedRuntime();
    runtime.present = true;
    runtime.inspects = [state('exited', 143, '2026-12-03T08:00:30Z')];
    runtime.events = { actions: ['kill', 'die'], complete: true };
    const claimedAtMs = T0 - 10_000;
    const { result } = await executePair(
      deps(runtime),
      input({ reattach: { containerId: 'c1', claimedAtMs } }),
    );
    expect(runtime.eventsSince).toEqual([claimedAtMs]);
    expect(runtime.calls).not.toContain('wait');
    expect(runtime.calls.slice(0, 1)).toEqual(['follow']);
    expect(result.reasons).toEqual(['engine_restarted', 'outcome_missing']);
    expect(result.container).toMatchObject({ id: 'c1', exit_code: 143, timed_out: false });
  });

  it('a reattach to a container still running waits until the original deadline', async () => {
    const runtime = new ScriptedRuntime();
    runtime.present = true;
    runtime.inspects = [state('running', null), state('running', null), state('exited', 0)];
    const { result } = await executePair(
      deps(runtime),
      input({ reattach: { containerId: 'c1', claimedAtMs: T0 } }),
    );
    expect(runtime.waitDeadlines).toEqual([DEADLINE]);
    expect(result.reasons).toEqual(['outcome_missing']);
  });

  it('a fault of the lifecycle loop itself is raised, but only after the container is removed', async () => {
    const runtime = new ScriptedRuntime();
    runtime.inspects = ['refused', state('exited', 0)]; // the collection's probe sleeps, and the timer fails
    class TimerBroke extends Error {}
    const base = deps(runtime);
    const broken = {
      ...base,
      clock: { ...base.clock, sleep: () => Promise.reject(new TimerBroke('the timer broke')) },
    };
    await expect(executePair(broken, input())).rejects.toThrow(TimerBroke);
    expect(runtime.calls.at(-1)).toBe('remove');
    expect(runtime.present).toBe(false);
  });

  it('a valid outcome: published for the operator, masked in the evidence, hashed as kept, completed', async () => {
    const runtime = new ScriptedRuntime();
    const bytes = new TextEncoder().encode(
      JSON.stringify({ job_id: 'p1', infrastructure_failure: false, fatal_failure: false, note: SECRET }),
    );
    const published: string[] = [];
    const pair = input({ readOutcome: () => Promise.resolve({ state: 'present', bytes }) });
    const { result } = await executePair(
      {
        ...deps(runtime),
        publishOutcome: (b, path) => Promise.resolve(void published.push(`${path}:${b.length}`)),
        maskOutcome: (b) =>
          Promise.resolve({
            kept: new TextEncoder().encode(new TextDecoder().decode(b).replace(SECRET, '***')),
            masked: false,
          }),
      },
      pair,
    );
    expect(published).toEqual([`${pair.job.outcome_path}:${bytes.length}`]);
    expect(result.outcome_sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(JSON.stringify(result.outcome)).not.toContain(SECRET);
  });
  it('an outcome that breaks the contract: each broken rule in result.json outcome_problems, and logged once', async () => {
    const bytes = new TextEncoder().encode(
      JSON.stringify({ job_id: 'p1', arms: [], infrastructure_failure: 'no' }),
    );
    const warnings: { fields: unknown; msg: string }[] = [];
    const logger = {
      ...silentLogger,
      warn: (fields: unknown, msg: string) => void warnings.push({ fields, msg }),
    } as typeof silentLogger;
    const { result } = await executePair(
      { ...deps(new ScriptedRuntime()), logger },
      input({ readOutcome: () => Promise.resolve({ state: 'present', bytes }) }),
    );
    expect([result.classification, result.reasons]).toEqual(['infrastructure_failure', ['outcome_invalid']]);
    expect(result.outcome_problems).toEqual([
      { path: 'infrastructure_failure', message: 'must be a boolean' },
      { path: 'fatal_failure', message: 'is required (true or false; there is no default)' },
    ]);
    expect(warnings).toEqual([
      {
        fields: {
          job: 'p1',
          outcome_problems: [
            'infrastructure_failure: must be a boolean',
            'fatal_failure: is required (true or false; there is no default)',
          ],
        },
        msg: 'the outcome breaks the contract (SPEC §5.2): infrastructure_failure: must be a boolean; fatal_failure: is required (true or false; there is no default)',
      },
    ]);
  });

  it('a valid outcome has no outcome problems', async () => {
    const bytes = new TextEncoder().encode(
      JSON.stringify({ job_id: 'p1', infrastructure_failure: false, fatal_failure: false, arms: null }),
    );
    const { result } = await executePair(
      deps(new ScriptedRuntime()),
      input({ readOutcome: () => Promise.resolve({ state: 'present', bytes }) }),
    );
    expect([result.classification, result.outcome_problems]).toEqual(['completed', []]);
  });

  it('an operator copy that cannot be written is logged, never a verdict: the same classification as without one, its outcome hashed', async () => {
    const runtime = new ScriptedRuntime();
    const bytes = new TextEncoder().encode(
      JSON.stringify({ job_id: 'p1', infrastructure_failure: false, fatal_failure: false, arms: [] }),
    );
    const warnings: unknown[] = [];
    const logger = {
      ...silentLogger,
      warn: (fields: unknown) => void warnings.push(fields),
    } as typeof silentLogger;
    const { result } = await executePair(
      {
        ...deps(runtime),
        logger,
        publishOutcome: () =>
          Promise.reject(Object.assign(new Error('read-only file system'), { code: 'EROFS' })),
      },
      input({ readOutcome: () => Promise.resolve({ state: 'present', bytes }) }),
    );
    // The same verdict as a pair with no operator copy at all.
    const plain = (
      await executePair(
        deps(new ScriptedRuntime()),
        input({ jobRel: 'jobs/p3', readOutcome: () => Promise.resolve({ state: 'present', bytes }) }),
      )
    ).result;
    expect([result.classification, result.reasons]).toEqual([plain.classification, plain.reasons]);
    expect(result.outcome_sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(warnings).toEqual([expect.objectContaining({ job: 'p1' })]);
  });

  it('a B1 job gets its port variables, and a placement is passed to the engine; an empty placement is not', async () => {
    const runtime = new ScriptedRuntime();
    const ports = B1_PORT_VARIABLES.map((_, i) => 20000 + i);
    const base = input();
    await executePair(deps(runtime), {
      ...base,
      job: { ...base.job, ports, b1_ports: true, placement: ['node.hostname==n1'] },
    });
    expect(runtime.created?.env).toMatchObject(
      Object.fromEntries(B1_PORT_VARIABLES.map((name, i) => [name, String(20000 + i)])),
    );
    expect(runtime.created).toMatchObject({ placement: ['node.hostname==n1'] });
    const again = new ScriptedRuntime();
    await executePair(deps(again), { ...base, jobRel: 'jobs/p2', job: { ...base.job, placement: [] } });
    expect(again.created).not.toHaveProperty('placement');
    expect(Object.keys(again.created?.env ?? {}).filter((k) => k.startsWith('ROBOGUIDE_B1_'))).toEqual([]);
  });
});
