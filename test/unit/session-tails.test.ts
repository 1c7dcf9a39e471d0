import { execFileSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, open, rm, symlink, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readSessionTails } from '../../src/adapters/session-tails.js';
import { diagnoseSessions } from '../../src/app/diagnose-sessions.js';
import { RoboguideError } from '../../src/core/errors.js';
import { MAX_SESSION_FILES, MAX_TAIL_BYTES, reduceSessionTails } from '../../src/core/provider-failure.js';

const ERROR_LINE = JSON.stringify({
  type: 'event_msg',
  payload: {
    type: 'error',
    message: 'x',
    codex_error_info: { response_too_many_failed_attempts: { http_status_code: 429 } },
  },
});
const QUIET_LINE = JSON.stringify({ type: 'response_item', payload: { type: 'message' } });
const FAILURE = {
  schema: 'roboguide.provider_failure/v1',
  kind: 'response_too_many_failed_attempts',
  http_status: 429,
};
const isRoot = process.getuid?.() === 0;

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'session-tails-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function writeSession(path: string, text: string, mtimeSec = 1_700_000_000): Promise<void> {
  await writeFile(path, text);
  await utimes(path, mtimeSec, mtimeSec);
}

describe('readSessionTails', () => {
  it('yields [] for a missing directory', async () => {
    expect(await readSessionTails(join(dir, 'absent'))).toEqual([]);
  });

  it('walks recursively and reads only *.jsonl files, whole and not partial when small', async () => {
    await mkdir(join(dir, '2025', '01', '02'), { recursive: true });
    await writeSession(join(dir, '2025', '01', '02', 'rollout-a.jsonl'), `${ERROR_LINE}\n`);
    await writeSession(join(dir, 'notes.json'), `${QUIET_LINE}\n`);
    await writeSession(join(dir, 'rollout.jsonl.bak'), `${QUIET_LINE}\n`);
    const tails = await readSessionTails(dir);
    expect(tails).toEqual([{ mtimeMs: 1_700_000_000_000, text: `${ERROR_LINE}\n`, partial: false }]);
  });

  it('returns tails oldest first', async () => {
    await writeSession(join(dir, 'b.jsonl'), 'new\n', 1_700_000_200);
    await writeSession(join(dir, 'a.jsonl'), 'old\n', 1_700_000_100);
    expect((await readSessionTails(dir)).map((t) => t.text)).toEqual(['old\n', 'new\n']);
  });

  it('keeps only the 32 newest files: the 33rd (oldest) is ignored', async () => {
    await writeSession(join(dir, 'oldest.jsonl'), `${ERROR_LINE}\n`, 1_700_000_000);
    for (let i = 1; i <= MAX_SESSION_FILES; i += 1) {
      await writeSession(join(dir, `s-${i}.jsonl`), `${QUIET_LINE}\n`, 1_700_000_000 + i);
    }
    const tails = await readSessionTails(dir);
    expect(tails).toHaveLength(MAX_SESSION_FILES);
    expect(tails.some((t) => t.text.includes('"error"'))).toBe(false);
    expect(reduceSessionTails(tails)).toBeNull();
  });

  it('skips symlinked files and does not follow symlinked directories', async () => {
    const outside = await mkdtemp(join(tmpdir(), 'session-outside-'));
    try {
      await writeSession(join(outside, 'real.jsonl'), `${ERROR_LINE}\n`);
      await symlink(join(outside, 'real.jsonl'), join(dir, 'link.jsonl'));
      await symlink(outside, join(dir, 'linked-dir'));
      expect(await readSessionTails(dir)).toEqual([]);
    } finally {
      await rm(outside, { recursive: true, force: true });
    }
  });

  it('skips special files named *.jsonl (a FIFO never blocks the read)', async () => {
    execFileSync('mkfifo', [join(dir, 'pipe.jsonl')]);
    await writeSession(join(dir, 'real.jsonl'), `${ERROR_LINE}\n`);
    const tails = await readSessionTails(dir);
    expect(tails.map((t) => t.text)).toEqual([`${ERROR_LINE}\n`]);
  });

  it.skipIf(isRoot)('skips unreadable files silently (skipped when running as root)', async () => {
    await writeSession(join(dir, 'locked.jsonl'), `${ERROR_LINE}\n`);
    await chmod(join(dir, 'locked.jsonl'), 0o000);
    expect(await readSessionTails(dir)).toEqual([]);
  });

  it('reads only the last 2 MiB: an error event before them is not seen', async () => {
    const fillerLines = Math.ceil(MAX_TAIL_BYTES / (QUIET_LINE.length + 1)) + 10;
    const filler = `${QUIET_LINE}\n`.repeat(fillerLines);
    await writeSession(join(dir, 'big.jsonl'), `${ERROR_LINE}\n${filler}`);
    const [tail] = await readSessionTails(dir);
    expect(tail?.partial).toBe(true);
    expect(Buffer.byteLength(tail?.text ?? '')).toBe(MAX_TAIL_BYTES);
    expect(reduceSessionTails(await readSessionTails(dir))).toBeNull();
    await writeSession(join(dir, 'big.jsonl'), `${ERROR_LINE}\n${filler.slice(0, 4096)}`);
    expect(reduceSessionTails(await readSessionTails(dir))).toEqual(FAILURE);
  });

  it('reads the tail of a 4 GiB sparse file without reading the whole file', async () => {
    const path = join(dir, 'sparse.jsonl');
    const handle = await open(path, 'w');
    try {
      const tailBytes = Buffer.from(`\n${QUIET_LINE}\n${ERROR_LINE}\n`);
      await handle.truncate(4 * 1024 ** 3);
      await handle.write(tailBytes, 0, tailBytes.length, 4 * 1024 ** 3);
    } finally {
      await handle.close();
    }
    const tails = await readSessionTails(dir);
    expect(tails[0]?.text.length).toBeLessThanOrEqual(MAX_TAIL_BYTES);
    expect(reduceSessionTails(tails)).toEqual(FAILURE);
  });

  it('decodes invalid UTF-8 as U+FFFD', async () => {
    await writeFile(join(dir, 'bin.jsonl'), Buffer.from([0x7b, 0xff, 0xfe, 0x7d, 0x0a]));
    const [tail] = await readSessionTails(dir);
    expect(tail?.text).toBe('{\uFFFD\uFFFD}\n');
  });
});

describe('diagnoseSessions', () => {
  it('joins the reader and the reducer', async () => {
    await writeSession(join(dir, 'rollout.jsonl'), `${QUIET_LINE}\n${ERROR_LINE}\n`);
    expect(await diagnoseSessions(dir)).toEqual(FAILURE);
  });

  it('reports no failure for a missing directory by default', async () => {
    expect(await diagnoseSessions(join(dir, 'absent'))).toBeNull();
  });

  it('throws E_USAGE with exit code 2 for a missing directory when one is required', async () => {
    const err: unknown = await diagnoseSessions(join(dir, 'absent'), { requireDirectory: true }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(RoboguideError);
    expect(err).toMatchObject({ code: 'E_USAGE', exitCode: 2 });
    expect((err as Error).message).toContain('absent');
  });
});
