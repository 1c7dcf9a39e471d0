import { createHash } from 'node:crypto';
import { lstat, mkdir, mkdtemp, readdir, readFile, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { prepareBatch } from '../../src/app/batch/start-batch.js';
import { supervise } from '../../src/app/batch/supervisor.js';
import { systemClock } from '../../src/adapters/system-clock.js';
import { silentLogger } from '../../src/app/ports/logger.js';
import { runPair } from '../../src/app/pair/run-pair.js';
import { createExecutePairDeps } from '../../src/composition-root.js';
import type { ResultRecord } from '../../src/core/result.js';
import {
  containersLabelled,
  DRIVER_IMAGE,
  expectNoContainersLeft,
  noDocker,
  pairRunDeps,
  runtime,
} from '../support/docker.js';
import { procHostIdentity } from '../../src/adapters/host-identity.js';
import { installFailpoints } from '../../src/app/ports/failpoints.js';

/**
 * Pairs are hostile (issue 10 part 2/3): each one below attacks what is not its own, on the real engine, in the
 * shared layout of the README (one cwd, one `out/` folder for every job). Every attack must end with the
 * expected result for the attacker, the slot released, and the other pairs' verdicts byte-identical.
 */
const rt = runtime();
let work: string;
let registryPath: string;
const SH = '/bin/sh';

/** A valid outcome for job $ROBOGUIDE_JOB_ID written the way the driver does (temp file, mv). */
const WRITE_OWN =
  'printf \'{"job_id":"%s","infrastructure_failure":false,"fatal_failure":false,"arms":[{"arm":"A","verdict":"own"}]}\' "$ROBOGUIDE_JOB_ID" > "$ROBOGUIDE_OUTCOME_PATH.tmp" && mv "$ROBOGUIDE_OUTCOME_PATH.tmp" "$ROBOGUIDE_OUTCOME_PATH"';

interface JobSpec {
  readonly id: string;
  readonly argv: readonly string[];
  readonly environment?: Record<string, string>;
  /** Its own cwd (outcome in `<cwd>/out/`); absent: the shared one. */
  readonly cwd?: string;
}

function shell(script: string): string[] {
  return [SH, '-c', script];
}

async function startBatch(
  name: string,
  shared: string,
  jobs: readonly JobSpec[],
  extra: Record<string, unknown> = {},
): Promise<EvidenceStore> {
  const path = join(work, `${name}.json`);
  await writeFile(
    path,
    JSON.stringify({
      schema: 'roboguide.e1.batch/v0.1',
      image: DRIVER_IMAGE,
      jobs: jobs.map((j) => ({
        job_id: j.id,
        argv: j.argv,
        cwd: j.cwd ?? shared,
        outcome_path: join(j.cwd ?? shared, 'out', `${j.id}.json`),
        environment: j.environment ?? {},
        timeout_seconds: 60,
      })),
      stop_budget_seconds: 5,
      ...extra,
    }),
  );
  const output = join(work, name, 'batch');
  await prepareBatch(
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
  return new EvidenceStore(new NodeFileSystem(), output);
}

async function supervised(store: EvidenceStore, mode: 'start' | 'resume'): Promise<string> {
  const registry = SqliteCapacityRegistry.open({ path: registryPath });
  try {
    return await supervise(
      {
        store,
        registry,
        execute: createExecutePairDeps(rt, silentLogger),
        logger: silentLogger,
        environment: {},
        handleSignals: false,
      },
      mode,
    );
  } finally {
    registry.closeSync();
  }
}

async function resultOf(store: EvidenceStore, id: string): Promise<ResultRecord> {
  return JSON.parse(await readFile(store.resolve(`jobs/${id}/result.json`), 'utf8')) as ResultRecord;
}

async function heldFor(batchId: string): Promise<number> {
  const registry = SqliteCapacityRegistry.open({ path: registryPath });
  try {
    return (await registry.held({ batchId })).length;
  } finally {
    registry.closeSync();
  }
}

/** Every file under `root` with its SHA-256 (the verdict evidence of the pairs that must not change). */
async function fingerprint(root: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const rel of (await readdir(root, { recursive: true })).map(String).sort()) {
    const path = join(root, rel);
    if (!(await lstat(path)).isFile()) continue;
    out[rel] = createHash('sha256')
      .update(await readFile(path))
      .digest('hex');
  }
  return out;
}

async function batchIdOf(store: EvidenceStore): Promise<string> {
  return (JSON.parse(await readFile(store.resolve('batch.json'), 'utf8')) as { batch_id: string }).batch_id;
}

describe.skipIf(noDocker)('hostile pairs against the real engine', () => {
  let shared: string;
  let victim: EvidenceStore;
  let victimPrint: Record<string, string>;
  let victimOutcome: Buffer;

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-hostile-'));
    registryPath = join(work, 'registry.db');
    shared = join(work, 'shared');
    await mkdir(join(shared, 'out'), { recursive: true });
    // The victim: a first batch whose pair finished normally in the shared layout; its evidence is then frozen.
    victim = await startBatch('victim', shared, [
      { id: 'victim', argv: ['/opt/driver/run', 'outcome=completed'] },
    ]);
    expect(await supervised(victim, 'start')).toBe('drained');
    expect((await resultOf(victim, 'victim')).classification).toBe('completed');
    victimPrint = await fingerprint(victim.root);
    victimOutcome = await readFile(join(shared, 'out', 'victim.json'));
  });

  afterAll(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it('attacks through the shared out/ folder, the evidence directory, the registry, depth, size and a symlink: each pair gets its own result, the batch goes on', async () => {
    const victimD = victim.root;
    const attackD = join(work, 'attack', 'batch');
    const env = { VICTIM_D: victimD, ATTACK_D: attackD, REGISTRY: registryPath, SHARED: shared };
    const deep =
      'n=5000; o=""; c=""; while [ $n -gt 0 ]; do o="$o["; c="$c]"; n=$((n-1)); done; ' +
      'printf \'{"job_id":"%s","infrastructure_failure":false,"fatal_failure":false,"arms":%s%s}\' "$ROBOGUIDE_JOB_ID" "$o" "$c" > "$ROBOGUIDE_OUTCOME_PATH"';
    const store = await startBatch('attack', shared, [
      // Writes every other job's outcome path in the shared out/ folder (fatal verdicts), then its own.
      {
        id: 'h-cross',
        argv: shell(
          `for j in victim g1 g2 h-deep; do printf '{"job_id":"%s","infrastructure_failure":false,"fatal_failure":true,"arms":[]}' "$j" > "$SHARED/out/$j.json"; done; ${WRITE_OWN}`,
        ),
        environment: env,
      },
      // Tries the evidence directories and the registry by their host paths and through every mount it has.
      {
        id: 'h-evidence',
        argv: shell(
          'for t in "$VICTIM_D/jobs/victim/result.json" "$VICTIM_D/jobs/victim/terminal-proof.json" "$ATTACK_D/jobs/h-evidence/receipt.json" "$ATTACK_D/jobs/g1/receipt.json" "$REGISTRY"; do mkdir -p "$(dirname "$t")" 2>/dev/null; printf pwned > "$t" 2>/dev/null; done; ' +
            'for m in $(cut -d" " -f2 /proc/mounts); do for d in "$m" "$m/.." "$m/../.." "$m/../../.."; do printf pwned > "$d/pwned-by-hostile" 2>/dev/null; printf pwned > "$d/receipt.json" 2>/dev/null; done; done; ' +
            WRITE_OWN,
        ),
        environment: env,
      },
      { id: 'g1', argv: ['/opt/driver/run', 'outcome=completed'] },
      { id: 'h-deep', argv: shell(deep) },
      { id: 'g2', argv: ['/opt/driver/run', 'outcome=completed'] },
      { id: 'h-large', argv: shell('head -c 17825792 /dev/zero > "$ROBOGUIDE_OUTCOME_PATH"') },
      { id: 'g3', argv: ['/opt/driver/run', 'outcome=completed'] },
      { id: 'h-link', argv: shell(`${WRITE_OWN}; ln -sf /etc/shadow "$ROBOGUIDE_OUTCOME_PATH"`) },
      { id: 'g4', argv: ['/opt/driver/run', 'outcome=completed'] },
    ]);
    const batchId = await batchIdOf(store);

    const state = await supervised(store, 'start');
    expect(state, await readFile(store.resolve('SUMMARY.json'), 'utf8')).toBe('drained');
    const results = Object.fromEntries(
      await Promise.all(
        ['h-cross', 'h-evidence', 'g1', 'h-deep', 'g2', 'h-large', 'g3', 'h-link', 'g4'].map(
          async (id) => [id, await resultOf(store, id)] as const,
        ),
      ),
    );

    // The attackers: their own outcome decides their own result, nothing else.
    expect(results['h-cross']).toMatchObject({
      classification: 'completed',
      outcome: { job_id: 'h-cross', fatal_failure: false },
    });
    expect(results['h-evidence']).toMatchObject({
      classification: 'completed',
      outcome: { job_id: 'h-evidence' },
    });
    expect(results['h-deep']).toMatchObject({
      classification: 'infrastructure_failure',
      reasons: ['outcome_too_deep'],
      outcome: null,
    });
    expect(results['h-large']).toMatchObject({
      classification: 'infrastructure_failure',
      reasons: ['outcome_too_large'],
      outcome: null,
      outcome_sha256: null,
    });
    expect(results['h-link']).toMatchObject({
      classification: 'infrastructure_failure',
      reasons: ['outcome_unparseable'],
      outcome: null,
    });
    expect(JSON.stringify(results['h-link'])).not.toContain('root:');

    // The good pairs of the attacked batch: completed with their own verdict, and the host copy is theirs.
    for (const id of ['g1', 'g2', 'g3', 'g4']) {
      const result = results[id]!;
      expect(result, id).toMatchObject({
        classification: 'completed',
        reasons: [],
        outcome: { job_id: id, fatal_failure: false },
      });
      const hostCopy = await readFile(join(shared, 'out', `${id}.json`));
      expect(createHash('sha256').update(hostCopy).digest('hex'), id).toBe(result.outcome_sha256);
      expect(await readFile(store.resolve(`jobs/${id}/outcome/${id}.json`))).toEqual(hostCopy);
    }

    // The finished victim batch: every byte of its evidence as it was, its host outcome copy too.
    expect(await fingerprint(victim.root)).toEqual(victimPrint);
    expect(await readFile(join(shared, 'out', 'victim.json'))).toEqual(victimOutcome);

    // Nothing of the attack reached the evidence directory outside each pair's own outcome folder, nor the registry.
    const attackFiles = (await readdir(store.root, { recursive: true })).map(String);
    expect(
      attackFiles.filter((f) => f.endsWith('pwned-by-hostile') && !/^jobs\/[^/]+\/outcome\//.test(f)),
    ).toEqual([]);
    for (const id of ['h-evidence', 'g1']) {
      const receipt = JSON.parse(await readFile(store.resolve(`jobs/${id}/receipt.json`), 'utf8')) as {
        job_id: string;
        batch_id: string;
      };
      expect(receipt).toMatchObject({ job_id: id, batch_id: batchId });
    }
    expect((await readFile(registryPath)).includes('pwned')).toBe(false);
    expect(await heldFor(batchId)).toBe(0);

    // The symlink never became the host copy, and nothing from /etc/shadow was read.
    await expect(lstat(join(shared, 'out', 'h-link.json'))).rejects.toMatchObject({ code: 'ENOENT' });
    // The 17 MiB outcome was not copied either (never read); the deep one was (bytes kept for the operator).
    await expect(lstat(join(shared, 'out', 'h-large.json'))).rejects.toMatchObject({ code: 'ENOENT' });

    // Resume finds nothing to redo: the results stand, no pause, no second run.
    const before = await fingerprint(join(store.root, 'jobs'));
    expect(await supervised(store, 'resume')).toBe('drained');
    expect(await fingerprint(join(store.root, 'jobs'))).toEqual(before);
    expect(await containersLabelled({ 'roboguide.batch': batchId })).toEqual([]);
  });
});

describe.skipIf(noDocker)('two workers of one batch in one shared out/ folder', () => {
  let shared: string;
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-hostile-workers-'));
    registryPath = join(work, 'registry.db');
    shared = join(work, 'shared');
  });
  afterAll(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it("the attacker rewrites the running victim's outcome path the whole time: the victim's verdict is its own", async () => {
    // w1 measures a GPU peak that fits twice, so the supervisor runs the next two pairs at once (SPEC §6).
    const capacity = { max_workers: 2, gpu_total_mib: 81559, gpu_baseline_mib: 1200, gpu_fraction: 0.9 };
    const store = await startBatch(
      'workers',
      shared,
      [
        { id: 'w1', argv: ['/opt/driver/run', 'usage=36000', 'outcome=completed'] },
        { id: 'victim2', argv: ['/opt/driver/run', 'sleep=3', 'outcome=completed', 'sleep=3'] },
        {
          id: 'attacker2',
          argv: shell(
            `i=0; while [ $i -lt 40 ]; do printf '{"job_id":"victim2","infrastructure_failure":false,"fatal_failure":true,"arms":[]}' > "$SHARED/out/victim2.json"; i=$((i+1)); sleep 0.2; done; ${WRITE_OWN}`,
          ),
          environment: { SHARED: shared },
        },
      ],
      { capacity },
    );
    expect(await supervised(store, 'start')).toBe('drained');
    const victim2 = await resultOf(store, 'victim2');
    const attacker2 = await resultOf(store, 'attacker2');
    expect(Date.parse(attacker2.started_at)).toBeLessThan(Date.parse(victim2.finished_at)); // they ran at once
    expect(victim2).toMatchObject({
      classification: 'completed',
      reasons: [],
      outcome: { job_id: 'victim2', fatal_failure: false },
    });
    expect(attacker2).toMatchObject({ classification: 'completed', outcome: { job_id: 'attacker2' } });
    const hostCopy = await readFile(join(shared, 'out', 'victim2.json'));
    expect(createHash('sha256').update(hostCopy).digest('hex')).toBe(victim2.outcome_sha256);
    expect(await heldFor(await batchIdOf(store))).toBe(0);
    expect(await containersLabelled({ 'roboguide.batch': await batchIdOf(store) })).toEqual([]);
  });
});

describe.skipIf(noDocker)('two pair runs at once in one shared out/ folder', () => {
  const jobsUsed: string[] = [];
  let dir: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-hostile-two-'));
  });
  afterAll(async () => {
    await expectNoContainersLeft(jobsUsed);
    await rm(dir, { recursive: true, force: true });
  });

  it("a pair rewriting the other one's outcome path while both run changes nothing of the other's verdict", async () => {
    const cwd = join(dir, 'cwd');
    const spec = (id: string, argv: string[]): string =>
      JSON.stringify({
        job_id: id,
        argv,
        cwd,
        outcome_path: join(cwd, 'out', `${id}.json`),
        image: DRIVER_IMAGE,
        timeout_seconds: 60,
      });
    const victimId = `two-victim-${Date.now().toString(36)}`;
    const attackerId = `two-attacker-${Date.now().toString(36)}`;
    jobsUsed.push(victimId, attackerId);
    const run = (id: string, text: string) =>
      runPair(pairRunDeps(rt), {
        specText: text,
        specSource: `${id}.json`,
        output: join(dir, id),
        bindAddress: '127.0.0.1',
        environment: {},
        codeVersion: 'test',
        cwd: dir,
      });
    const [victimRun, attackerRun] = await Promise.all([
      run(victimId, spec(victimId, ['/opt/driver/run', 'sleep=2', 'outcome=completed', 'sleep=3'])),
      run(
        attackerId,
        spec(
          attackerId,
          shell(
            `i=0; while [ $i -lt 40 ]; do printf '{"job_id":"${victimId}","infrastructure_failure":false,"fatal_failure":true,"arms":[]}' > "${cwd}/out/${victimId}.json"; i=$((i+1)); sleep 0.2; done; ${WRITE_OWN}`,
          ),
        ),
      ),
    ]);
    expect(victimRun.result).toMatchObject({
      classification: 'completed',
      outcome: { job_id: victimId, fatal_failure: false },
    });
    expect(attackerRun.result).toMatchObject({
      classification: 'completed',
      outcome: { job_id: attackerId },
    });
    const victimCopy = await readFile(join(cwd, 'out', `${victimId}.json`));
    expect(createHash('sha256').update(victimCopy).digest('hex')).toBe(victimRun.result.outcome_sha256);
    expect(victimRun.reconciliation.kind).toBe('committed');
    expect(attackerRun.reconciliation.kind).toBe('committed');
  });
});

/**
 * Mounts that cannot be redirected (issue 22): the pair's cwd swapped for a link to a host folder — by another
 * batch's pair, by anything on the host after `start`, or between the launch check and the create (a pause point) —
 * fails that pair closed with `mount_refused` (its container never started, removed and verified), the other pairs'
 * verdicts stand, and nothing of the host folder is read or written.
 */
describe.skipIf(noDocker)('a cwd swapped for a link to a host folder', () => {
  let root: string;
  let hostFolder: string;
  const good = { id: 'good', argv: ['/opt/driver/run', 'outcome=completed'] };

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-hostile-swap-'));
    registryPath = join(work, 'registry.db');
    root = join(work, 'w');
    // Stands for a host folder a pair must never get (the engine's socket folder, /etc…): its bytes are checked after.
    hostFolder = join(work, 'host-secrets');
    await mkdir(hostFolder);
    await writeFile(join(hostFolder, 'config.v2.json'), '{"Env":["OPENAI_API_KEY=sk-host-secret"]}');
  });
  afterAll(async () => {
    installFailpoints(null);
    await rm(work, { recursive: true, force: true });
  });

  async function expectRefusedAndOthersFine(
    store: EvidenceStore,
    victimId: string,
    rule: RegExp,
    /** The victim ran (in the folder checked) before the check after the start refused it: its outcome may be there. */
    ranFirst = false,
  ): Promise<void> {
    const victim = await resultOf(store, victimId);
    expect(victim).toMatchObject(
      ranFirst
        ? { classification: 'infrastructure_failure', reasons: expect.arrayContaining(['mount_refused']) }
        : {
            classification: 'infrastructure_failure',
            reasons: ['mount_refused', 'outcome_missing'],
            outcome: null,
          },
    );
    expect(victim.engine_error?.message).toMatch(rule);
    expect(victim.cleanup.verified_absent).toBe(true);
    expect(await resultOf(store, 'good')).toMatchObject({
      classification: 'completed',
      reasons: [],
      outcome: { job_id: 'good' },
    });
    expect(await containersLabelled({ 'roboguide.batch': await batchIdOf(store) })).toEqual([]);
    expect(await heldFor(await batchIdOf(store))).toBe(0);
    expect(await readdir(hostFolder)).toEqual(['config.v2.json']);
    expect(JSON.stringify(await fingerprint(store.root))).not.toContain('sk-host-secret');
    for (const log of ['stdout.log', 'stderr.log']) {
      const text = await readFile(store.resolve(`jobs/${victimId}/${log}`), 'utf8').catch(() => '');
      expect(text).not.toContain('sk-host-secret');
    }
  }

  it("a sibling: a pair of another batch replaces a folder below its cwd that is the next batch's cwd", async () => {
    const attackerCwd = join(root, 'sib');
    const victimCwd = join(attackerCwd, 'victim');
    // The victim's batch is started (checked) first, while its cwd is an ordinary (missing) folder.
    const victimBatch = await startBatch('sib-victim', root, [
      { id: 'victim', cwd: victimCwd, argv: shell(`cat config.v2.json; ${WRITE_OWN}`) },
      { ...good, cwd: join(root, 'sib-good') },
    ]);
    const attackerBatch = await startBatch('sib-attacker', root, [
      {
        id: 'attacker',
        cwd: attackerCwd,
        argv: shell(`rm -rf "$VICTIM_CWD"; ln -s "$HOST_FOLDER" "$VICTIM_CWD"; ${WRITE_OWN}`),
        environment: { VICTIM_CWD: victimCwd, HOST_FOLDER: hostFolder },
      },
    ]);
    expect(await supervised(attackerBatch, 'start')).toBe('drained');
    expect((await lstat(victimCwd)).isSymbolicLink()).toBe(true); // the attack took place
    expect(await supervised(victimBatch, 'start')).toBe('drained');
    await expectRefusedAndOthersFine(victimBatch, 'victim', /victim is a symbolic link/);
  });

  it('on the host after start: the cwd becomes a link between `start` and the launch', async () => {
    const cwd = join(root, 'host-swap');
    await mkdir(cwd, { recursive: true });
    const store = await startBatch('host-swap', root, [
      { id: 'victim', cwd, argv: shell(`cat config.v2.json; ${WRITE_OWN}`) },
      { ...good, cwd: join(root, 'host-good') },
    ]);
    await rm(cwd, { recursive: true });
    await symlink(hostFolder, cwd);
    expect(await supervised(store, 'start')).toBe('drained');
    await expectRefusedAndOthersFine(store, 'victim', /host-swap is a symbolic link/);
  });

  it('during create: the cwd is swapped between the launch check and the create (pause point mount_checked)', async () => {
    const cwd = join(root, 'create-swap');
    const store = await startBatch('create-swap', root, [
      { id: 'victim', cwd, argv: shell(`cat config.v2.json; ${WRITE_OWN}`) },
      { ...good, cwd: join(root, 'create-good') },
    ]);
    let swapped = 0;
    installFailpoints({
      hit: () => undefined,
      pause: async (name) => {
        if (name !== 'mount_checked' || swapped > 0) return;
        swapped++;
        // The guard checked (and made) the folder; it becomes a link before the engine sees the path.
        await rm(cwd, { recursive: true });
        await symlink(hostFolder, cwd);
      },
    });
    try {
      expect(await supervised(store, 'start')).toBe('drained');
    } finally {
      installFailpoints(null);
    }
    expect(swapped).toBe(1);
    await expectRefusedAndOthersFine(store, 'victim', /create-swap is a symbolic link/);
    // The engine created the container, the guard removed it before anything attached to it or started it.
    await expect(lstat(store.resolve('jobs/victim/stdout.log'))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('between the create and the start (pause point after_container_created): the cwd becomes a link; the container gets the folder checked, never the host folder, and is refused', async () => {
    // The attack that checks after the fact only detect: the engine resolved the path at the start, after the guard's
    // last look before it, so the pair's first process ran in the host folder before the check after the start
    // killed it. Staged, the engine mounts the folder that was opened and checked, whatever the path is now.
    const cwd = join(root, 'start-swap');
    const store = await startBatch('start-swap', root, [
      { id: 'victim', cwd, argv: shell(`cat config.v2.json; ${WRITE_OWN}`) },
      { ...good, cwd: join(root, 'start-good') },
    ]);
    let swapped = 0;
    installFailpoints({
      hit: () => undefined,
      pause: async (name) => {
        if (name !== 'after_container_created' || swapped > 0) return;
        swapped++;
        await rename(cwd, `${cwd}-checked`);
        await symlink(hostFolder, cwd);
      },
    });
    try {
      expect(await supervised(store, 'start')).toBe('drained');
    } finally {
      installFailpoints(null);
    }
    expect(swapped).toBe(1);
    await expectRefusedAndOthersFine(store, 'victim', /start-swap is a symbolic link/, true);
    // What it read was the folder checked (renamed aside), not the host folder the link names.
    const stdout = await readFile(store.resolve('jobs/victim/stdout.log'), 'utf8');
    expect(stdout).not.toContain('sk-host-secret');
  });
});
