import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
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
    const raw = Buffer.from(JSON.stringify({ job_id: 'j', arms: [{ k: SECRET, b: Buffer.from(SECRET).toString('base64') }] }));
    await writeFile(file, raw);
    const kept = await maskOutcomeCopy(raw, file, [SECRET]);
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
    const kept = await maskOutcomeCopy(raw, file, [SECRET]);
    expect(Buffer.from(kept).equals(raw)).toBe(true);
    expect((await stat(file)).ino).toBe(before.ino);
  });

  it('after a lost worker: the verdict is read from the driver bytes, the kept copy is masked', async () => {
    const file = join(dir, 'o.json');
    await writeFile(file, `{"job_id":"j","note":"${SECRET}"}`);
    const { read, kept } = await readAndMaskOutcome(file, [SECRET]);
    expect(read.state === 'present' && read.bytes.toString()).toContain(SECRET);
    expect(kept && Buffer.from(kept).toString()).not.toContain(SECRET);
    expect((await readFile(file, 'utf8')).includes(SECRET)).toBe(false);
    expect(await readAndMaskOutcome(join(dir, 'absent.json'), [SECRET])).toEqual({ read: { state: 'missing' }, kept: null });
  });
});
