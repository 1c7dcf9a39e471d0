import { chmod, chown, lstat, mkdir, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { RoboguideError } from '../../src/core/errors.js';
import { HOSTILE_UID, runAsHostile, startExchangeAdversary } from '../support/exchange-adversary.js';

/**
 * docs/secrets.md "Local users", F6: a local user (65534) must not steer where root's output folder is, nor what
 * root chmods. Real file system; the adversary is a real process of that user. Needs root (to be the victim).
 */
const asRoot = process.geteuid?.() === 0;

let base = '';
let sticky = '';
let victim = '';
const fs = new NodeFileSystem();

beforeEach(async () => {
  base = await mkdtemp(join(tmpdir(), 'rg-out-local-'));
  await chmod(base, 0o755);
  sticky = join(base, 'sticky');
  await mkdir(sticky);
  await chmod(sticky, 0o1777);
  victim = join(base, 'victim');
  await mkdir(victim);
  await chmod(victim, 0o755);
  await writeFile(join(victim, 'keep'), 'root');
});

afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

async function refusal(output: string): Promise<RoboguideError> {
  const err: unknown = await EvidenceStore.createOutputDir(fs, output).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(RoboguideError);
  return err as RoboguideError;
}

async function expectVictimUntouched(): Promise<void> {
  expect(((await lstat(victim)).mode & 0o7777).toString(8)).toBe('755');
  expect(await readdir(victim)).toEqual(['keep']);
}

async function hostileDir(path: string, mode: number): Promise<void> {
  await mkdir(path);
  await chown(path, HOSTILE_UID, HOSTILE_UID);
  await chmod(path, mode);
}

describe.skipIf(!asRoot)('output folder: a local user cannot steer it (F6)', () => {
  it('(a) a folder pre-created at the predictable name by another user is refused, named, and left alone', async () => {
    const output = join(sticky, 'roboguide-pair-job-20261204T233700Z');
    await hostileDir(output, 0o777);
    const err = await refusal(output);
    expect(err.code).toBe('E_OUTPUT_UNSAFE');
    expect(err.exitCode).toBe(2);
    expect(err.message).toBe(
      `--output: ${output} is owned by user ${HOSTILE_UID}, not by you (another user could swap it)`,
    );
    expect(((await lstat(output)).mode & 0o7777).toString(8)).toBe('777');
    expect(await readdir(output)).toEqual([]);
  });

  it('(a) a folder we made in a sticky folder cannot be moved away by another user: writes stay in it', async () => {
    const output = join(sticky, 'roboguide-pair-job-20261204T233701Z');
    await EvidenceStore.createOutputDir(fs, output);
    expect(((await lstat(output)).mode & 0o7777).toString(8)).toBe('700');
    // The sticky bit: a user may rename or remove only their own entries of a world-writable folder.
    expect(await runAsHostile('mv', [output, join(sticky, 'moved')])).not.toBe(0);
    expect(await runAsHostile('ln', ['-sfn', victim, output])).not.toBe(0);
    const store = new EvidenceStore(fs, output);
    await store.writeJsonAtomic('result.json', { ok: true });
    expect(await readdir(output)).toEqual(['result.json']);
    await expectVictimUntouched();
  });

  it('(c) a link planted at the name is refused as a link, never followed', async () => {
    const output = join(sticky, 'roboguide-pair-job-20261204T233702Z');
    expect(await runAsHostile('ln', ['-s', victim, output])).toBe(0);
    const err = await refusal(output);
    expect(err.code).toBe('E_OUTPUT_UNSAFE');
    expect(err.message).toMatch(/is a symbolic link \(never followed/);
    await expectVictimUntouched();
  });

  it('a folder above the output that another user owns, or that anyone may write to without sticky, is refused', async () => {
    const nob = join(base, 'nob');
    await hostileDir(nob, 0o755);
    expect((await refusal(join(nob, 'out'))).message).toBe(
      `--output: ${nob} is owned by user ${HOSTILE_UID}, neither you nor root (that user could rename what is inside)`,
    );
    const open = join(base, 'open');
    await mkdir(open);
    await chmod(open, 0o777);
    expect((await refusal(join(open, 'out'))).message).toMatch(
      /open is writable by other users and not sticky/,
    );
    const link = join(base, 'link');
    await symlink(sticky, link);
    expect((await refusal(join(link, 'out'))).message).toMatch(/link is a symbolic link/);
    expect(await readdir(sticky)).toEqual([]);
  });

  // (b): lstat saw a 777 folder, then a path chmod followed the link swapped in for it (root's victim went 700).
  for (const layout of ['sticky', 'hostile'] as const) {
    it(`(b) ${layout} parent: 200 claims against a concurrent RENAME_EXCHANGE of a folder and a link never chmod the victim`, async () => {
      const parent = layout === 'sticky' ? sticky : join(base, 'x');
      if (layout === 'hostile') await hostileDir(parent, 0o777);
      const race = join(parent, 'race');
      const swap = join(parent, 'swap');
      expect(await runAsHostile('mkdir', ['-m', '777', race])).toBe(0);
      expect(await runAsHostile('ln', ['-s', victim, swap])).toBe(0);
      const adversary = await startExchangeAdversary(race, swap);
      const codes = new Map<string, number>();
      let victimChangedAt: number | null = null;
      try {
        for (let i = 1; i <= 200 && victimChangedAt === null; i++) {
          const code = await EvidenceStore.createOutputDir(fs, race).then(
            () => 'accepted',
            (e: unknown) => (e instanceof RoboguideError ? e.code : String(e)),
          );
          codes.set(code, (codes.get(code) ?? 0) + 1);
          if (((await lstat(victim)).mode & 0o7777) !== 0o755) victimChangedAt = i;
        }
      } finally {
        const swaps = await adversary.stop();
        console.log(
          `(b) ${layout}: ${swaps} swaps, outcomes ${JSON.stringify([...codes])}, victim ${victimChangedAt}`,
        );
        expect(swaps).toBeGreaterThan(200);
      }
      expect(victimChangedAt).toBeNull();
      expect(Object.fromEntries(codes)).toEqual({ E_OUTPUT_UNSAFE: 200 });
      await expectVictimUntouched();
    });
  }
});
