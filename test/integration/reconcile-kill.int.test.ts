/**
 * SIGKILL of the reconciler at each step of `reconcile --execute`, then execute again: the board
 * ends terminal, the reservation is released exactly once, and no evidence is lost. The reconciler
 * runs in a child process against the built dist/ (the integration suite runs after `npm run build`)
 * and kills itself at the chosen point; no Docker engine is needed.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { reconcilePair } from '../../src/app/pair/reconcile-pair.js';
import { sha256Hex } from '../../src/app/digest.js';
import { canonicalJson } from '../../src/core/terminal-proof.js';
import {
  buildFinishedPair,
  FakeContainerRuntime,
  outcomeSha256OrNull,
  steppingClock,
} from '../support/finished-pair.js';

const dist = (rel: string): string => pathToFileURL(resolve('dist', rel)).href;

/** Kills itself at KILL_AT: an afterStep point, or inside the proof's atomic write (fs wrapper). */
const CHILD_SCRIPT = `
const { EvidenceStore } = await import(process.env.STORE_MODULE);
const { NodeFileSystem } = await import(process.env.FS_MODULE);
const { SqliteCapacityRegistry } = await import(process.env.REGISTRY_MODULE);
const { reconcilePair } = await import(process.env.RECONCILE_MODULE);
const { createHash } = await import('node:crypto');
const { readFile } = await import('node:fs/promises');
const killAt = process.env.KILL_AT;
const die = () => {
  process.kill(process.pid, 'SIGKILL');
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5000);
  process.exit(99);
};
const fs = new NodeFileSystem();
const rename = fs.rename.bind(fs);
fs.rename = async (from, to) => {
  const proof = to.endsWith('/terminal-proof.json');
  if (proof && killAt === 'proof temp written, before rename') die();
  await rename(from, to);
  if (proof && killAt === 'proof renamed, before dir fsync') die();
};
const registry = SqliteCapacityRegistry.open({ path: process.env.REGISTRY_DB });
const report = await reconcilePair({
  store: new EvidenceStore(fs, process.env.ROOT),
  registry,
  runtime: { inspect: async () => null, listByLabel: async () => [] },
  readOutcomeSha256: async (path) => {
    try { return createHash('sha256').update(await readFile(path)).digest('hex'); }
    catch (err) { if (err.code === 'ENOENT') return null; throw err; }
  },
  afterStep: (step) => { if (step === killAt) die(); },
}, { jobRel: process.env.JOB_REL, mode: 'execute' });
process.stdout.write(JSON.stringify(report));
`;

interface KillCase {
  readonly at: string;
  readonly proofAfterKill: boolean;
  readonly heldAfterKill: boolean;
  readonly rerun: 'committed' | 'already_committed';
}

const CASES: readonly KillCase[] = [
  { at: 'evidence_read', proofAfterKill: false, heldAfterKill: true, rerun: 'committed' },
  { at: 'proof_built', proofAfterKill: false, heldAfterKill: true, rerun: 'committed' },
  { at: 'proof temp written, before rename', proofAfterKill: false, heldAfterKill: true, rerun: 'committed' },
  { at: 'proof renamed, before dir fsync', proofAfterKill: true, heldAfterKill: true, rerun: 'committed' },
  { at: 'proof_written', proofAfterKill: true, heldAfterKill: true, rerun: 'committed' },
  // Board row and release are one transaction: killed after it, both are done.
  { at: 'board_terminal', proofAfterKill: true, heldAfterKill: false, rerun: 'already_committed' },
  { at: 'reservation_released', proofAfterKill: true, heldAfterKill: false, rerun: 'already_committed' },
];

const rows: string[][] = [];
let tmp: string;
let registry: SqliteCapacityRegistry;

function runChild(
  env: Record<string, string>,
): Promise<{ signal: NodeJS.Signals | null; code: number | null; stderr: string }> {
  const args = ['--disable-warning=ExperimentalWarning', '--input-type=module', '-e', CHILD_SCRIPT];
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, args, {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (code, signal) => resolvePromise({ code, signal, stderr }));
  });
}

beforeAll(() => {
  if (!existsSync(resolve('dist/app/pair/reconcile-pair.js')))
    throw new Error('dist/ is missing: run `npm run build` first');
});

beforeEach(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'rg-kill-'));
  registry = SqliteCapacityRegistry.open({ path: join(tmp, 'registry.db'), clock: steppingClock() });
});

afterEach(async () => {
  registry.closeSync();
  await rm(tmp, { recursive: true, force: true });
});

afterAll(() => {
  const header = [
    'SIGKILL at',
    'proof after kill',
    'reservation after kill',
    'execute again',
    'replay',
    'board',
    'reservation',
    'temp files left',
  ];
  const table = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...table.map((r) => (r[i] ?? '').length)));
  const line = (r: string[]): string => `| ${r.map((c, i) => c.padEnd(widths[i] ?? 0)).join(' | ')} |`;
  console.log(
    [
      '',
      'Reconciler kill matrix',
      line(header),
      line(widths.map((w) => '-'.repeat(w))),
      ...rows.map(line),
    ].join('\n'),
  );
});

describe('reconcile --execute killed at each step', () => {
  it.each(CASES)('SIGKILL at $at, then execute again', async (c) => {
    const root = join(tmp, 'D');
    const pair = await buildFinishedPair({ root, outcomeDir: join(tmp, 'out'), registry });
    const jobDir = join(root, pair.jobRel);
    const evidenceBefore = await readdir(jobDir);
    const child = await runChild({
      STORE_MODULE: dist('app/evidence/evidence-store.js'),
      FS_MODULE: dist('adapters/fs/node-file-system.js'),
      REGISTRY_MODULE: dist('adapters/registry/sqlite-capacity-registry.js'),
      RECONCILE_MODULE: dist('app/pair/reconcile-pair.js'),
      REGISTRY_DB: join(tmp, 'registry.db'),
      ROOT: root,
      JOB_REL: pair.jobRel,
      KILL_AT: c.at,
    });
    expect(child.signal, child.stderr).toBe('SIGKILL');

    const store = new EvidenceStore(new NodeFileSystem(), root);
    const proofRel = `${pair.jobRel}/terminal-proof.json`;
    expect(await store.exists(proofRel)).toBe(c.proofAfterKill);
    expect((await registry.reservation(pair.reservationId))?.state).toBe(
      c.heldAfterKill ? 'held' : 'released',
    );

    const deps = {
      store,
      registry,
      runtime: new FakeContainerRuntime(),
      readOutcomeSha256: outcomeSha256OrNull,
    };
    const again = await reconcilePair(deps, { jobRel: pair.jobRel, mode: 'execute' });
    expect(again.kind).toBe(c.rerun);
    const releasedAt = (await registry.reservation(pair.reservationId))?.releasedAt;
    const replay = await reconcilePair(deps, { jobRel: pair.jobRel, mode: 'execute' });
    expect(replay.kind).toBe('already_committed');

    const proofSha = sha256Hex(canonicalJson(JSON.parse(await readFile(join(root, proofRel), 'utf8'))));
    const board = (await registry.board({ claimId: pair.receipt.claim_id }))[0];
    const reservation = await registry.reservation(pair.reservationId);
    expect(again.proof_sha256).toBe(proofSha);
    expect(board).toMatchObject({ state: 'terminal', proofSha256: proofSha });
    expect(reservation).toMatchObject({ state: 'released', proofSha256: proofSha, releasedAt });
    const after = await readdir(jobDir);
    for (const name of evidenceBefore) expect(after).toContain(name);
    const temps = after.filter((n) => n.includes('.tmp-'));
    rows.push([
      c.at,
      c.proofAfterKill ? 'present' : 'absent',
      c.heldAfterKill ? 'held' : 'released',
      again.kind,
      replay.kind,
      board?.state ?? '?',
      reservation?.state ?? '?',
      String(temps.length),
    ]);
  });
});
