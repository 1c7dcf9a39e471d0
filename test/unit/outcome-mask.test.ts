import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { maskOutcomeCopy, readAndMaskOutcome } from '../../src/adapters/outcome-reader.js';

const SECRET = 'sk-live-outcome-0123456789abcdef';
let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-outcome-mask-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('the evidence copy of an outcome', () => {
  it('is replaced by its masked bytes when it holds a secret (raw and base64), and those bytes are returned', async () => {
    const file = join(dir, 'o.json');
    const raw = Buffer.from(
      JSON.stringify({ job_id: 'j', arms: [{ k: SECRET, b: Buffer.from(SECRET).toString('base64') }] }),
    );
    await writeFile(file, raw);
    const { kept, masked } = await maskOutcomeCopy(raw, file, [SECRET]);
    expect(masked).toBe(true);
    const onDisk = await readFile(file);
    expect(Buffer.from(kept).equals(onDisk)).toBe(true);
    expect(onDisk.toString('latin1')).not.toContain(SECRET);
    expect(onDisk.toString('latin1')).not.toContain(Buffer.from(SECRET).toString('base64').slice(0, 16));
    expect(onDisk.toString('latin1')).toContain('[REDACTED');
  });

  it('is left alone (same file, same bytes) when nothing needs masking', async () => {
    const file = join(dir, 'o.json');
    const raw = Buffer.from('{"job_id":"j","arms":[]}');
    await writeFile(file, raw);
    const before = await stat(file);
    const { kept } = await maskOutcomeCopy(raw, file, [SECRET]);
    expect(Buffer.from(kept).equals(raw)).toBe(true);
    expect((await stat(file)).ino).toBe(before.ino);
  });

  it('leaves a file that changed since it was read alone, and returns the masked bytes read (reconciliation then sees the change)', async () => {
    const file = join(dir, 'o.json');
    const read = Buffer.from(`{"job_id":"j","note":"${SECRET}"}`);
    const newer = Buffer.from('{"job_id":"j","note":"final verdict"}');
    await writeFile(file, newer);
    const { kept, masked } = await maskOutcomeCopy(read, file, [SECRET]);
    expect(masked).toBe(true);
    expect(Buffer.from(kept).toString()).not.toContain(SECRET);
    expect((await readFile(file)).equals(newer)).toBe(true);
    expect(createHash('sha256').update(kept).digest('hex')).not.toBe(
      createHash('sha256').update(newer).digest('hex'),
    );
  });

  it('when the copy cannot be replaced (ENOSPC), keeps it and returns its bytes with masked: false (the pair is not held for ever)', async () => {
    const file = join(dir, 'o.json');
    const raw = Buffer.from(`{"job_id":"j","note":"${SECRET}"}`);
    await writeFile(file, raw);
    const full = (): Promise<void> =>
      Promise.reject(Object.assign(new Error('no space left on device'), { code: 'ENOSPC' }));
    const { kept, masked } = await maskOutcomeCopy(raw, file, [SECRET], full);
    expect(masked).toBe(false);
    expect(Buffer.from(kept).equals(raw)).toBe(true);
    expect((await readFile(file)).equals(raw)).toBe(true);
  });

  it('replaces the copy even when a folder above it is a symlink (an output directory on a linked disk)', async () => {
    const real = join(dir, 'real');
    await mkdir(join(real, 'outcome'), { recursive: true });
    await symlink(real, join(dir, 'linked'));
    const file = join(dir, 'linked', 'outcome', 'o.json');
    const raw = Buffer.from(`{"job_id":"j","note":"${SECRET}"}`);
    await writeFile(file, raw);
    const { masked } = await maskOutcomeCopy(raw, file, [SECRET]);
    expect(masked).toBe(true);
    expect((await readFile(file, 'utf8')).includes(SECRET)).toBe(false);
  });

  it('after a lost worker: the verdict is read from the driver bytes, the kept copy is masked', async () => {
    const file = join(dir, 'o.json');
    await writeFile(file, `{"job_id":"j","note":"${SECRET}"}`);
    const { read, kept } = await readAndMaskOutcome(file, [SECRET]);
    expect(read.state === 'present' && read.bytes.toString()).toContain(SECRET);
    expect(kept && Buffer.from(kept).toString()).not.toContain(SECRET);
    expect((await readFile(file, 'utf8')).includes(SECRET)).toBe(false);
    expect(await readAndMaskOutcome(join(dir, 'absent.json'), [SECRET])).toEqual({
      read: { state: 'missing' },
      kept: null,
      masked: true,
    });
  });
});
