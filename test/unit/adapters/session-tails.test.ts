import { execFileSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, open, rm, symlink, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createZstdCompress, zstdCompressSync } from 'node:zlib';
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import { createWriteStream } from 'node:fs';
import {
  fileSessionTails,
  MAX_ZST_BYTES,
  MAX_ZST_DECOMPRESSED_BYTES,
  readSessionFiles,
  readSessionTails,
  zstdAvailable,
} from '../../../src/adapters/session-tails.js';
import { diagnoseSessions, diagnoseSessionsReport } from '../../../src/library.js';
import {
  diagnoseSessions as diagnoseSessionsOf,
  diagnoseSessionsReport as diagnoseSessionsReportOf,
} from '../../../src/app/diagnose-sessions.js';
import type { SessionTails } from '../../../src/app/ports/session-tails.js';
import { RoboguideError } from '../../../src/core/errors.js';
import { MAX_SESSION_FILES, MAX_TAIL_BYTES, reduceSessionTails } from '../../../src/core/provider-failure.js';

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

  it("a pair's diagnosis never asks whether zstd can be read (node:zlib stays unloaded); the report does", async () => {
    const tails = {
      read: () => Promise.resolve({ tails: [], unreadable: 0 }),
      isDirectory: () => Promise.resolve(true),
      get zstdAvailable(): boolean {
        throw new Error('zstdAvailable asked');
      },
    } as unknown as SessionTails;
    expect(await diagnoseSessionsOf(tails, dir)).toBeNull();
    await expect(diagnoseSessionsReportOf(tails, dir)).rejects.toThrow('zstdAvailable asked');
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

describe('compressed rollouts (*.jsonl.zst)', () => {
  const zst = (text: string): Buffer => zstdCompressSync(Buffer.from(text));

  it('this Node can decompress zstd', () => {
    expect(zstdAvailable()).toBe(true);
    expect(fileSessionTails.zstdAvailable).toBe(true);
  });

  it('reads a .jsonl.zst that has no plain sibling, whole and not partial when small', async () => {
    await writeSession(join(dir, 'rollout-a.jsonl.zst'), '');
    await writeFile(join(dir, 'rollout-a.jsonl.zst'), zst(`${QUIET_LINE}\n${ERROR_LINE}\n`));
    const files = await readSessionFiles(dir);
    expect(files.unreadable).toBe(0);
    expect(files.compressedSeen).toBe(true);
    expect(files.tails.map((t) => [t.text, t.partial])).toEqual([[`${QUIET_LINE}\n${ERROR_LINE}\n`, false]]);
    expect(await diagnoseSessions(dir)).toEqual(FAILURE);
  });

  it('prefers the plain .jsonl sibling: the .zst of the same name is not read', async () => {
    await writeSession(join(dir, 'rollout-a.jsonl'), `${QUIET_LINE}\n`);
    await writeFile(join(dir, 'rollout-a.jsonl.zst'), zst(`${ERROR_LINE}\n`));
    const files = await readSessionFiles(dir);
    expect(files.tails.map((t) => t.text)).toEqual([`${QUIET_LINE}\n`]);
    expect(files.compressedSeen).toBe(false);
    expect(await diagnoseSessions(dir)).toBeNull();
  });

  it('keeps only the last MAX_TAIL_BYTES of the decompressed text', async () => {
    const fillerLines = Math.ceil(MAX_TAIL_BYTES / (QUIET_LINE.length + 1)) + 10;
    const filler = `${QUIET_LINE}\n`.repeat(fillerLines);
    await writeFile(join(dir, 'early.jsonl.zst'), zst(`${ERROR_LINE}\n${filler}`));
    const [tail] = await readSessionTails(dir);
    expect(tail?.partial).toBe(true);
    expect(Buffer.byteLength(tail?.text ?? '')).toBe(MAX_TAIL_BYTES);
    expect(await diagnoseSessions(dir)).toBeNull();
    await writeFile(join(dir, 'early.jsonl.zst'), zst(`${filler}${ERROR_LINE}\n`));
    expect(await diagnoseSessions(dir)).toEqual(FAILURE);
  });

  it('counts a corrupt .jsonl.zst as unreadable, and still reads the others', async () => {
    await writeSession(join(dir, 'ok.jsonl'), `${ERROR_LINE}\n`, 1_700_000_000);
    const broken = zst(`${QUIET_LINE}\n`.repeat(100));
    broken.fill(0x41, 8, 24);
    await writeSession(join(dir, 'broken.jsonl.zst'), '', 1_700_000_100);
    await writeFile(join(dir, 'broken.jsonl.zst'), broken);
    await writeSession(join(dir, 'not-zstd.jsonl.zst'), `${QUIET_LINE}\n`, 1_700_000_100);
    const report = await diagnoseSessionsReport(dir);
    expect(report.files_unreadable).toBe(2);
    expect(report.files_read).toBe(1);
    expect(report.provider_failure).toEqual(FAILURE);
  });

  it('refuses a compressed file over MAX_ZST_BYTES without decompressing it (unreadable)', async () => {
    const handle = await open(join(dir, 'huge.jsonl.zst'), 'w');
    try {
      await handle.truncate(MAX_ZST_BYTES + 1);
    } finally {
      await handle.close();
    }
    const files = await readSessionFiles(dir);
    expect(files).toMatchObject({ tails: [], unreadable: 1 });
  });

  it('stops a decompression bomb past MAX_ZST_DECOMPRESSED_BYTES (unreadable)', async () => {
    const path = join(dir, 'bomb.jsonl.zst');
    const line = Buffer.from(`${QUIET_LINE}\n`.repeat(Math.ceil((1024 * 1024) / (QUIET_LINE.length + 1))));
    const chunks = Math.ceil(MAX_ZST_DECOMPRESSED_BYTES / line.length) + 1;
    await pipeline(
      Readable.from(
        (function* () {
          for (let i = 0; i < chunks; i += 1) yield line;
        })(),
      ),
      createZstdCompress(),
      createWriteStream(path),
    );
    const files = await readSessionFiles(dir);
    expect(files).toMatchObject({ tails: [], unreadable: 1 });
  }, 120_000);
});
