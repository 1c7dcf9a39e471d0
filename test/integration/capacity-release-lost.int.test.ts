/**
 * `capacity release --evidence-lost` on the real engine and a real SQLite registry: a `pair run` SIGKILLed with its
 * container running keeps its slot; once its evidence folder is deleted, `reconcile` has nothing to prove it from,
 * so the slot was held for ever (before this command: no way back short of editing the database). The command
 * refuses while the container exists and while the evidence exists, previews without writing, then writes its proof
 * and releases in one commit; a replay changes nothing.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canonicalJson } from '../../src/core/terminal-proof.js';
import { BIN, cli } from '../support/cli.js';
import { DRIVER_IMAGE, noDocker, runtime } from '../support/docker.js';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';

let dir: string;
let registryPath: string;

async function until<T>(what: string, probe: () => Promise<T | null>, ms = 60_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const found = await probe();
    if (found !== null) return found;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function held(): Promise<{ jobId: string; claimId: string; batchId: string }[]> {
  const registry = SqliteCapacityRegistry.open({ path: registryPath });
  try {
    return await registry.held();
  } finally {
    await registry.close();
  }
}

const release = (batch: string, mode: '--preview' | '--execute', ...extra: string[]) =>
  cli([
    'capacity',
    'release',
    '--registry',
    registryPath,
    '--batch',
    batch,
    '--job',
    'lost',
    '--evidence-lost',
    mode,
    ...extra,
  ]);

describe.skipIf(noDocker)('capacity release --evidence-lost (a slot whose evidence was deleted)', () => {
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-release-lost-'));
    registryPath = join(dir, 'registry.db');
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('refuses while the container or the evidence exists, then proves, releases, and a replay changes nothing', async () => {
    const spec = join(dir, 'lost.json');
    const cwd = join(dir, 'lost');
    const evidence = join(dir, 'lost-evidence');
    await writeFile(
      spec,
      JSON.stringify({
        job_id: 'lost',
        argv: ['/opt/driver/run', 'numbered=1', 'hang'],
        cwd,
        outcome_path: join(cwd, 'out', 'o.json'),
        image: DRIVER_IMAGE,
        network: 'none',
      }),
    );
    const child = spawn(
      process.execPath,
      [
        '--disable-warning=ExperimentalWarning',
        BIN,
        'pair',
        'run',
        '--spec',
        spec,
        '--output',
        evidence,
        '--registry',
        registryPath,
      ],
      { stdio: 'ignore' },
    );
    const containerId = await until('the running container', async () => {
      const receipt = await readFile(join(evidence, 'receipt.json'), 'utf8').then(
        (t) => JSON.parse(t) as { container_id: string | null },
        () => null,
      );
      const id = receipt?.container_id ?? null;
      return id !== null && (await runtime().inspect(id))?.status === 'running' ? id : null;
    });
    child.kill('SIGKILL');
    await new Promise((r) => child.on('close', r));
    const [slot] = await held();
    expect(slot?.jobId).toBe('lost');
    const batch = slot!.batchId;

    // The container still runs: refused, naming it.
    const running = await release(batch, '--execute');
    expect(running.code, running.stdout + running.stderr).toBe(1);
    expect(running.stdout).toContain('REFUSED (container_present)');
    expect(running.stdout).toContain(containerId.slice(0, 12));
    await runtime().remove(containerId);

    // The evidence is still there: reconcile is the way, not this.
    const present = await release(batch, '--execute');
    expect(present.code).toBe(1);
    expect(present.stdout).toContain('REFUSED (evidence_present)');
    expect(present.stdout).toContain(evidence);
    expect(await held()).toHaveLength(1);

    await rm(evidence, { recursive: true, force: true });
    await rm(cwd, { recursive: true, force: true });

    // Preview: the plan, nothing written, still held.
    const preview = await release(batch, '--preview', '--json');
    expect(preview.code, preview.stderr).toBe(0);
    const plan = JSON.parse(preview.stdout) as { kind: string; proof_path: string };
    expect(plan.kind).toBe('would_release');
    expect(await stat(plan.proof_path).catch(() => null)).toBeNull();
    expect(await held()).toHaveLength(1);

    const done = await release(batch, '--execute', '--json');
    expect(done.code, done.stdout + done.stderr).toBe(0);
    const result = JSON.parse(done.stdout) as { kind: string; proof_path: string; proof_sha256: string };
    expect(result.kind).toBe('released');
    expect(await held()).toHaveLength(0);
    const proof = JSON.parse(await readFile(result.proof_path, 'utf8')) as Record<string, unknown>;
    expect(proof).toMatchObject({
      run_id: slot!.claimId,
      reason: 'evidence_lost',
      container_id: containerId,
    });
    expect(createHash('sha256').update(canonicalJson(proof)).digest('hex')).toBe(result.proof_sha256);
    const registry = SqliteCapacityRegistry.open({ path: registryPath });
    try {
      const [row] = await registry.board({ claimId: slot!.claimId });
      expect(row).toMatchObject({
        state: 'terminal',
        classification: 'infrastructure_failure',
        proofSha256: result.proof_sha256,
      });
    } finally {
      await registry.close();
    }

    const replay = await release(batch, '--execute', '--json');
    expect(replay.code, replay.stderr).toBe(0);
    expect((JSON.parse(replay.stdout) as { kind: string }).kind).toBe('already_released');
  }, 120_000);

  it('a registry that does not exist is refused (exit 2) and not created', async () => {
    const missing = join(dir, 'nowhere.db');
    const out = await cli([
      'capacity',
      'release',
      '--registry',
      missing,
      '--batch',
      'b',
      '--job',
      'j',
      '--evidence-lost',
      '--preview',
    ]);
    expect(out.code).toBe(2);
    expect(out.stderr).toContain(`no registry at ${missing}`);
    expect(await stat(missing).catch(() => null)).toBeNull();
  });
});
