import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable, Writable } from 'node:stream';
import { extract } from 'tar-stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { checkUpload, openChecked } from '../../../src/adapters/serve-archive.js';
import { DEFAULT_EXTRACT_LIMITS } from '../../../src/adapters/safe-extract.js';
import { failingStream, tarBytes, tarStream } from '../../support/hostile-tar.js';

/** `PUT /v1/sessions/{id}/archive`: what reaches the container is a clean re-pack of the client's tar, or nothing. */
let temp: string;
beforeEach(async () => {
  temp = await mkdtemp(join(tmpdir(), 'rg-serve-archive-'));
});
afterEach(async () => {
  await rm(temp, { recursive: true, force: true });
});

async function entriesOf(stream: Readable): Promise<{ name: string; type: string; body: string }[]> {
  const parser = extract();
  stream.pipe(parser);
  const out: { name: string; type: string; body: string }[] = [];
  for await (const entry of parser) {
    const chunks: Buffer[] = [];
    for await (const c of entry) chunks.push(c as Buffer);
    out.push({
      name: entry.header.name,
      type: entry.header.type ?? 'file',
      body: Buffer.concat(chunks).toString(),
    });
  }
  return out;
}

describe('checkUpload', () => {
  it('re-packs a clean archive (files and directories), counts it, and disposes of its temporary folder', async () => {
    const upload = await checkUpload(
      await tarStream([
        { name: 'sub', type: 'directory' },
        { name: 'sub/a.txt', body: 'alpha' },
        { name: 'b.txt', body: 'be' },
      ]),
      temp,
    );
    expect([upload.files, upload.bytes, upload.refusals, upload.unwritten]).toEqual([2, 7, [], null]);
    expect(await entriesOf(openChecked(upload))).toEqual([
      { name: 'sub', type: 'directory', body: '' },
      { name: 'sub/a.txt', type: 'file', body: 'alpha' },
      { name: 'b.txt', type: 'file', body: 'be' },
    ]);
    await upload.dispose();
    expect(await readdir(temp)).toEqual([]);
  });

  it('refuses what safe extraction refuses (a symlink, a path that climbs out), and packs nothing after a refusal', async () => {
    const upload = await checkUpload(
      await tarStream([
        { name: 'evil', type: 'symlink', linkname: '/etc/passwd' },
        { name: '../up.txt', body: 'x' },
        { name: 'ok.txt', body: 'late' },
      ]),
      temp,
    );
    expect(upload.refusals.length).toBeGreaterThanOrEqual(2);
    expect(await entriesOf(openChecked(upload))).toEqual([]);
    await upload.dispose();
  });

  it('keeps a symbolic link whose target stays inside the destination, and the modes; lists what may not replace a directory', async () => {
    const upload = await checkUpload(
      await tarStream([
        { name: 'bin', type: 'directory', mode: 0o750 },
        { name: 'bin/run.sh', body: 'x', mode: 0o4755 },
        { name: 'bin/latest', type: 'symlink', linkname: 'run.sh' },
        { name: 'up', type: 'symlink', linkname: 'bin/../bin/run.sh' },
      ]),
      temp,
    );
    expect(upload.refusals).toEqual([]);
    expect(upload.nonDirectories).toEqual(['bin/run.sh', 'bin/latest', 'up']);
    const parser = extract();
    openChecked(upload).pipe(parser);
    const seen: string[] = [];
    for await (const entry of parser) {
      entry.resume();
      const h = entry.header;
      seen.push(
        `${h.name} ${h.type} ${((h.mode ?? 0) & 0o7777).toString(8)}${h.linkname ? ` -> ${h.linkname}` : ''}`,
      );
    }
    // The setuid bit is dropped; the permission bits are kept.
    expect(seen).toEqual([
      'bin directory 750',
      'bin/run.sh file 755',
      'bin/latest symlink 777 -> run.sh',
      'up symlink 777 -> bin/../bin/run.sh',
    ]);
    await upload.dispose();
  });

  it('refuses a link that is absolute, climbs out of the destination (even from a folder), or is a hard link', async () => {
    for (const [name, linkname] of [
      ['a', '/etc'],
      ['a', '..'],
      ['d/a', '../../x'],
      ['d/a', '../d/../../x'],
    ] as const) {
      const upload = await checkUpload(await tarStream([{ name, type: 'symlink', linkname }]), temp);
      expect(upload.refusals, `${name} -> ${linkname}`).toEqual([
        expect.stringMatching(/^symlink (to an absolute path|escaping the destination) refused: /),
      ]);
      await upload.dispose();
    }
    const hard = await checkUpload(
      await tarStream([
        { name: 'f', body: 'x' },
        { name: 'h', type: 'link', linkname: 'f' },
      ]),
      temp,
    );
    expect(hard.refusals).toEqual(['hard link refused: h']);
    await hard.dispose();
  });

  it('the count and size limits: too many files, one file too big, the whole too big', async () => {
    const small = { ...DEFAULT_EXTRACT_LIMITS, maxFiles: 1, maxFileBytes: 4, maxTotalBytes: 6 };
    const many = await checkUpload(
      await tarStream([
        { name: 'a', body: '1' },
        { name: 'b', body: '2' },
      ]),
      temp,
      small,
    );
    expect(many.refusals).toEqual(['file count limit reached']);
    const big = await checkUpload(await tarStream([{ name: 'a', body: '12345' }]), temp, small);
    expect(big.refusals).toEqual(['file size limit reached: a']);
    const total = await checkUpload(
      await tarStream([
        { name: 'a', body: '1234' },
        { name: 'b', body: '1234' },
      ]),
      temp,
      { ...small, maxFiles: 5 },
    );
    expect(total.refusals).toEqual(['archive size limit reached']);
    for (const u of [many, big, total]) await u.dispose();
  });

  it('a body past the byte budget is cut off (and refused) without being read to its end, and left to the answer', async () => {
    const limits = { ...DEFAULT_EXTRACT_LIMITS, maxFiles: 1, maxTotalBytes: 10 };
    const bytes = await tarBytes([{ name: 'a', body: 'x'.repeat(64 * 1024) }]);
    const body = Readable.from([bytes.subarray(0, 32 * 1024), bytes.subarray(32 * 1024)]);
    const upload = await checkUpload(body, temp, limits);
    expect(upload.refusals).toContain('archive size limit reached');
    // Not destroyed: destroying a request destroys its connection, and the 400 would never reach the client (the
    // error answer says Connection: close and reads the rest itself).
    expect(body.destroyed).toBe(false);
    expect(body.readableEnded).toBe(false);
    await upload.dispose();
  });

  it('bytes that are no tar, more than every buffer on the way holds, are refused at once: the check does not wait for a reader that is gone', async () => {
    // The tar parser stops at the first bad header; the copy into it used to wait for room that never came (the
    // fuzz of serve: a PUT of 190 KB of "[" was never answered).
    const chunks = Array.from({ length: 16 }, () => Buffer.alloc(16 * 1024, '['));
    const body = Readable.from(chunks);
    const upload = await Promise.race([
      checkUpload(body, temp),
      new Promise<never>((_resolve, reject) =>
        setTimeout(() => reject(new Error('checkUpload hangs')), 5_000),
      ),
    ]);
    expect(upload.refusals.some((r) => r.startsWith('not a valid tar archive'))).toBe(true);
    expect(body.destroyed).toBe(false);
    expect(body.readableEnded).toBe(false); // the rest is the answer's to read and drop
    await upload.dispose();
  });

  it('a clean archive followed by end-of-archive padding past every buffer: read to its end and taken, so the connection can go on', async () => {
    const bytes = await tarBytes([{ name: 'a.txt', body: 'alpha' }]);
    const body = Readable.from([bytes, ...Array.from({ length: 16 }, () => Buffer.alloc(16 * 1024, 0))]);
    const upload = await Promise.race([
      checkUpload(body, temp),
      new Promise<never>((_resolve, reject) =>
        setTimeout(() => reject(new Error('checkUpload hangs')), 5_000),
      ),
    ]);
    expect([upload.files, upload.bytes, upload.refusals]).toEqual([1, 5, []]);
    expect(body.readableEnded).toBe(true);
    await upload.dispose();
  });

  it('a request already gone when the check starts (its close came before) is refused at once, not waited for', async () => {
    // The route asks the engine first (the session, the path): a client that left meanwhile must not hold the
    // session's transfer slot, a descriptor and a temporary folder for ever (an attacker's finding).
    const body = new Readable({ read() {} });
    body.push(Buffer.alloc(1000, 1));
    body.destroy();
    await new Promise((resolve) => setImmediate(resolve));
    const upload = await Promise.race([
      checkUpload(body, temp),
      new Promise<never>((_resolve, reject) =>
        setTimeout(() => reject(new Error('checkUpload hangs')), 5_000),
      ),
    ]);
    expect(upload.refusals).toContain('request body ended early');
    await upload.dispose();
    expect(await readdir(temp)).toEqual([]);
  });

  it('the refusals are capped: an archive of 20,000 refused entries gives a short list, and the check stops there', async () => {
    const name = `${'"'.repeat(90)}`;
    const entries = Array.from({ length: 20_000 }, (_, i) => ({
      name: `${name}${i}`,
      type: 'link' as const,
      linkname: 'x',
    }));
    const upload = await checkUpload(await tarStream(entries), temp);
    expect(upload.refusals.length).toBeLessThanOrEqual(101);
    expect(upload.refusals.at(-1)).toMatch(/^more refused: the check stopped after the first 100 refusals/);
    await upload.dispose();
  });

  it('a checked copy that cannot be written whole is reported by its code, never a clean upload of part of it', async () => {
    const bytes = await tarBytes([
      { name: 'a.txt', body: 'a'.repeat(4000) },
      { name: 'b.txt', body: 'b'.repeat(4000) },
    ]);
    // The temporary file's disk fills after 1,536 bytes (ENOSPC): a hand-written stand-in for the file stream.
    const full = (): Writable => {
      let written = 0;
      return new Writable({
        write(chunk: Buffer, _encoding, done) {
          written += chunk.length;
          if (written > 1536)
            done(Object.assign(new Error('ENOSPC: no space left on device'), { code: 'ENOSPC' }));
          else done();
        },
      });
    };
    const upload = await checkUpload(Readable.from([bytes]), temp, DEFAULT_EXTRACT_LIMITS, full);
    // By its code: an error's message may name the temporary file, a path of the host's. The route answers it before
    // any refusal (507, the server's disk, not the archive): the check ends with the copy.
    expect(upload.unwritten).toBe('ENOSPC');
    await upload.dispose();
  });

  it('what the container would refuse half-way is refused by the check, before anything is written: long names, a file where the archive has a directory, a path under a file (issue 39)', async () => {
    // A refusal is the 400 of the whole upload: nothing of its copy reaches the container (PUT …/archive).
    const refusedWith = async (
      entries: Parameters<typeof tarStream>[0],
    ): Promise<{ refusals: readonly string[] }> => {
      const upload = await checkUpload(await tarStream(entries), temp);
      await upload.dispose();
      return { refusals: upload.refusals };
    };
    const cases: [Parameters<typeof tarStream>[0], RegExp][] = [
      [
        [
          { name: 'x', type: 'directory' },
          { name: 'x', body: 'f' },
        ],
        /^file where the archive has a directory refused: x$/,
      ],
      [
        [
          { name: 'good.txt', body: 'g' },
          { name: 'f', body: 'f' },
          { name: 'f/x', body: 'x' },
        ],
        /^path under a file of the archive refused: f\/x$/,
      ],
      [
        [
          { name: 'a/b', body: 'b' },
          { name: 'a', body: 'a' },
        ],
        /^file where the archive has a directory refused: a$/,
      ],
      [
        [
          { name: 'good.txt', body: 'g' },
          { name: 'n'.repeat(256), body: 'x' },
        ],
        /^name component longer than 255 bytes refused/,
      ],
      [[{ name: 'a'.repeat(100_000), body: 'x' }], /^name component longer than 255 bytes refused/],
      [[{ name: `${'d/'.repeat(3000)}f`, body: 'x' }], /^path longer than 3072 bytes refused/],
    ];
    for (const [entries, rule] of cases) {
      const { refusals } = await refusedWith(entries);
      expect(refusals).toHaveLength(1);
      expect(refusals[0]).toMatch(rule);
    }
    // The longest names Linux takes, and a directory named again, or a file given twice, pass.
    const fine = await refusedWith([
      { name: 'n'.repeat(255), body: 'x' },
      { name: 'd', type: 'directory' },
      { name: 'd/e', body: 'e' },
      { name: 'd', type: 'directory' },
      { name: 'd/e', body: 'e2' },
    ]);
    expect(fine.refusals).toEqual([]);
  });

  it('a path through a symbolic link of the same archive, or a link whose target goes through one, is refused', async () => {
    // `sub/q -> ..` is the destination itself; `p -> sub/q/..` reads as `sub` but is the folder above it.
    const chain = await checkUpload(
      await tarStream([
        { name: 'sub', type: 'directory' },
        { name: 'sub/q', type: 'symlink', linkname: '..' },
        { name: 'p', type: 'symlink', linkname: 'sub/q/..' },
      ]),
      temp,
    );
    expect(chain.refusals).toEqual(['symlink through another symlink of the archive refused: p']);
    // Declared the other way round: the same.
    const reversed = await checkUpload(
      await tarStream([
        { name: 'p', type: 'symlink', linkname: 'sub/q/..' },
        { name: 'sub', type: 'directory' },
        { name: 'sub/q', type: 'symlink', linkname: '..' },
      ]),
      temp,
    );
    expect(reversed.refusals).toEqual(['symlink through another symlink of the archive refused: p']);
    // A file written through a link of the archive.
    const through = await checkUpload(
      await tarStream([
        { name: 'd', type: 'symlink', linkname: '.' },
        { name: 'd/evil.txt', body: 'x' },
      ]),
      temp,
    );
    expect(through.refusals).toEqual(['path through a symlink of the archive refused: d/evil.txt']);
    // A link to a link (its last step) stays allowed: each resolves inside on its own.
    const toLink = await checkUpload(
      await tarStream([
        { name: 'f.txt', body: 'x' },
        { name: 'l1', type: 'symlink', linkname: 'f.txt' },
        { name: 'l2', type: 'symlink', linkname: 'l1' },
      ]),
      temp,
    );
    expect(toLink.refusals).toEqual([]);
    for (const u of [chain, reversed, through, toLink]) await u.dispose();
  });

  it('a body that ends early, and bytes that are no tar at all, are refused with the reason', async () => {
    const bytes = await tarBytes([{ name: 'a', body: 'x'.repeat(2048) }]);
    const cut = await checkUpload(failingStream(bytes.subarray(0, 700)), temp);
    expect(cut.refusals).toContain('request body ended early');
    const garbage = await checkUpload(Readable.from([Buffer.alloc(1024, 7)]), temp);
    expect(garbage.refusals.some((r) => r.startsWith('not a valid tar archive'))).toBe(true);
    expect(await readFile(garbage.path)).toBeDefined();
    for (const u of [cut, garbage]) await u.dispose();
  });
});
