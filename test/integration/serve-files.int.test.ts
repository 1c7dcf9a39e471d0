import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import { extract, pack, type Header } from 'tar-stream';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  expectNoContainersLeft,
  startTestServer,
  type ApiResponse,
  type TestServer,
} from '../../src/testing/index.js';
import { DRIVER_IMAGE, noDocker } from '../support/docker.js';

/**
 * Issue 23, API fidelity: binary and streamed stdin, relative cwd and paths, file I/O as a user with that user's
 * permissions, file errors that say which, modes and links kept both ways, a directory never replaced by a file.
 */

const SECRET = `s3cr3t-${randomUUID()}`;
const RUN = `it-serve-files-${randomUUID().slice(0, 8)}`;
const LABEL = { 'it.serve-files': RUN };
const STREAM_TYPE = 'application/vnd.roboguide.exec-stream';

interface ExecOut {
  stdout: string;
  stderr: string;
  return_code: number;
  timed_out: boolean;
}
interface ApiErr {
  error: { code: string; message: string; issues: { path: string; rule: string }[] };
}

let s: TestServer;

async function session(extra: Record<string, unknown> = {}): Promise<string> {
  const res = await s.client.call<{ session_id: string }>('POST', '/v1/sessions', {
    body: { image: DRIVER_IMAGE, labels: LABEL, ...extra },
  });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.session_id;
}

async function sh(id: string, command: string, extra: Record<string, unknown> = {}): Promise<ExecOut> {
  const res = await s.client.call<ExecOut>('POST', `/v1/sessions/${id}/exec`, {
    body: { command, ...extra },
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body;
}

interface Entry {
  name: string;
  type?: Header['type'];
  mode?: number;
  linkname?: string;
  content?: string | Buffer;
}

function tarOf(entries: readonly Entry[]): Promise<Buffer> {
  const p = pack();
  for (const e of entries) {
    const type = e.type ?? 'file';
    const header = {
      name: e.name,
      type,
      mode: e.mode ?? (type === 'directory' ? 0o755 : 0o644),
      ...(e.linkname !== undefined ? { linkname: e.linkname } : {}),
    };
    if (type === 'file') p.entry(header, e.content ?? '');
    else p.entry(header);
  }
  p.finalize();
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    p.on('data', (c: unknown) => chunks.push(c as Buffer));
    p.on('end', () => resolve(Buffer.concat(chunks)));
    p.on('error', reject);
  });
}

async function entriesOf(
  bytes: Buffer,
): Promise<Map<string, { type: string; mode: number; linkname: string | null; content: string }>> {
  const found = new Map<string, { type: string; mode: number; linkname: string | null; content: string }>();
  const x = extract();
  const done = (async () => {
    for await (const entry of x) {
      const chunks: Buffer[] = [];
      for await (const c of entry) chunks.push(c as Buffer);
      const h = entry.header;
      found.set(h.name.replace(/\/$/, ''), {
        type: h.type ?? 'file',
        mode: (h.mode ?? 0) & 0o7777,
        linkname: h.linkname ?? null,
        content: Buffer.concat(chunks).toString('utf8'),
      });
    }
  })();
  x.end(bytes);
  await done;
  return found;
}

function put(
  id: string,
  path: string,
  tar: Buffer,
  query = '',
): Promise<ApiResponse<ApiErr & { files: number }>> {
  return s.client.call('PUT', `/v1/sessions/${id}/archive?path=${encodeURIComponent(path)}${query}`, {
    raw: tar,
  });
}

function get(
  id: string,
  route: 'archive' | 'file',
  path: string,
  query = '',
): Promise<ApiResponse<Buffer | ApiErr>> {
  return s.client.call('GET', `/v1/sessions/${id}/${route}?path=${encodeURIComponent(path)}${query}`);
}

async function bytesOf(id: string, route: 'archive' | 'file', path: string, query = ''): Promise<Buffer> {
  const res = await get(id, route, path, query);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body as Buffer;
}

function errorOf(res: ApiResponse<unknown>): { status: number; code: string } {
  return { status: res.status, code: (res.body as ApiErr).error?.code };
}

describe.skipIf(noDocker)('serve: file and stdin fidelity (issue 23), real engine', () => {
  beforeAll(async () => {
    s = await startTestServer({ env: { RG_TEST_SECRET: SECRET }, clientMode: 'raw' });
  });
  afterEach(async () => {
    const listed = await s.client.call<{ sessions: { session_id: string }[] }>('GET', '/v1/sessions');
    await Promise.all(
      listed.body.sessions.map((x) => s.client.call('DELETE', `/v1/sessions/${x.session_id}`)),
    );
    await expectNoContainersLeft(LABEL);
  });
  afterAll(async () => {
    await s?.dispose();
    await expectNoContainersLeft(LABEL);
  });

  it('stdin: base64 bytes in the JSON body, and the streamed form (50 MiB of binary, byte-exact, past the 16 MiB body cap)', async () => {
    const id = await session();
    const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const b64 = await sh(id, 'sha256sum | cut -d" " -f1', { stdin_base64: all.toString('base64') });
    expect(b64.stdout.trim()).toBe(createHash('sha256').update(all).digest('hex'));
    const both = await s.client.call<ApiErr>('POST', `/v1/sessions/${id}/exec`, {
      body: { command: 'cat', stdin: 'a', stdin_base64: 'YQ==' },
    });
    expect(both.status).toBe(400);
    expect(both.body.error.issues[0]?.path).toBe('stdin_base64');
    const badB64 = await s.client.call<ApiErr>('POST', `/v1/sessions/${id}/exec`, {
      body: { command: 'cat', stdin_base64: 'not base64!' },
    });
    expect(badB64.status).toBe(400);

    const big = randomBytes(50 * 1024 * 1024);
    const head = Buffer.from(
      `${JSON.stringify({ command: 'cat > /tmp/big && sha256sum < /tmp/big | cut -d" " -f1 && wc -c < /tmp/big' })}\n`,
    );
    // Sent in 1 MiB pieces: the server must stream them into the exec, not wait for the whole body.
    const body = Readable.from(
      (function* () {
        yield head;
        for (let at = 0; at < big.length; at += 1024 * 1024) yield big.subarray(at, at + 1024 * 1024);
      })(),
      { objectMode: false },
    );
    const streamed = await s.client.call<ExecOut>('POST', `/v1/sessions/${id}/exec`, {
      raw: body,
      headers: { 'content-type': STREAM_TYPE },
    });
    expect(streamed.status, JSON.stringify(streamed.body)).toBe(200);
    expect(streamed.body.stdout.split('\n').map((l) => l.trim())).toEqual([
      createHash('sha256').update(big).digest('hex'),
      String(big.length),
      '',
    ]);

    // The streamed form with ?stream=1: NDJSON out, raw stdin in.
    const ndjson = await s.client.call<Buffer>('POST', `/v1/sessions/${id}/exec?stream=1`, {
      raw: Buffer.concat([Buffer.from('{"argv":["od","-An","-tx1"]}\n'), Buffer.from([0, 255, 10])]),
      headers: { 'content-type': STREAM_TYPE },
    });
    const events = ndjson.body
      .toString('utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { stream?: string; data?: string; exit?: { return_code: number } });
    expect(
      events
        .filter((e) => e.stream === 'stdout')
        .map((e) => e.data)
        .join('')
        .trim(),
    ).toBe('00 ff 0a');
    expect(events.at(-1)?.exit?.return_code).toBe(0);
    // stdin inside the JSON line of the streamed form is refused, naming the field.
    const inLine = await s.client.call<ApiErr>('POST', `/v1/sessions/${id}/exec`, {
      raw: Buffer.from('{"command":"cat","stdin":"x"}\nrest'),
      headers: { 'content-type': STREAM_TYPE },
    });
    expect(inLine.status).toBe(400);
    expect(inLine.body.error.issues[0]?.path).toBe('stdin');
  });

  it('relative cwd and archive paths resolve against the session workdir (else the image WorkingDir, else /); .. stops at /', async () => {
    const withWorkdir = await session({ workdir: '/work' });
    await sh(withWorkdir, 'mkdir -p /work/sub');
    expect((await sh(withWorkdir, 'pwd', { cwd: 'sub' })).stdout).toBe('/work/sub\n');
    expect((await sh(withWorkdir, 'pwd', { cwd: '../../../..' })).stdout).toBe('/\n');
    expect(
      (await put(withWorkdir, 'rel/in', await tarOf([{ name: 'a.txt', content: 'alpha' }]))).status,
    ).toBe(200);
    expect((await sh(withWorkdir, 'cat /work/rel/in/a.txt')).stdout).toBe('alpha');
    expect((await bytesOf(withWorkdir, 'file', 'rel/in/a.txt')).toString()).toBe('alpha');
    const plain = await session();
    expect((await sh(plain, 'pwd', { cwd: 'tmp' })).stdout).toBe('/tmp\n');
  });

  it('modes and links round-trip: 0755 stays 0755, a link is made as a link and comes back as one', async () => {
    const id = await session();
    const tar = await tarOf([
      { name: 'bin', type: 'directory', mode: 0o750 },
      { name: 'bin/run.sh', mode: 0o755, content: '#!/bin/sh\necho ran\n' },
      { name: 'notes.txt', mode: 0o640, content: 'notes' },
      { name: 'bin/latest', type: 'symlink', linkname: 'run.sh' },
      { name: 'up', type: 'symlink', linkname: 'bin/../notes.txt' },
    ]);
    expect((await put(id, '/w', tar)).status).toBe(200);
    const inside = await sh(
      id,
      'cd /w && stat -c "%n %a %F" bin bin/run.sh notes.txt && readlink bin/latest && readlink up && bin/latest',
    );
    expect(inside.stdout).toBe(
      'bin 750 directory\nbin/run.sh 755 regular file\nnotes.txt 640 regular file\nrun.sh\nbin/../notes.txt\nran\n',
    );
    // Made by the engine's own tools: a link to a directory and an absolute link come back as links too.
    await sh(id, 'ln -s /etc /w/abs && ln -s bin /w/dirlink');
    const back = await entriesOf((await get(id, 'archive', '/w')).body as Buffer);
    expect(back.get('w/bin/run.sh')).toMatchObject({
      type: 'file',
      mode: 0o755,
      content: '#!/bin/sh\necho ran\n',
    });
    expect(back.get('w/bin')).toMatchObject({ type: 'directory', mode: 0o750 });
    expect(back.get('w/notes.txt')).toMatchObject({ mode: 0o640 });
    expect(back.get('w/bin/latest')).toMatchObject({ type: 'symlink', linkname: 'run.sh' });
    expect(back.get('w/abs')).toMatchObject({ type: 'symlink', linkname: '/etc' });
    expect(back.get('w/dirlink')).toMatchObject({ type: 'symlink', linkname: 'bin' });
    // The link is not followed: nothing of /etc came along.
    expect([...back.keys()].filter((k) => k.startsWith('w/abs/'))).toEqual([]);
  });

  it('an upload with an escaping or absolute link is refused whole, nothing written', async () => {
    const id = await session();
    for (const linkname of ['../../etc', '/etc/passwd', 'a/../../x']) {
      const res = await put(
        id,
        '/dest',
        await tarOf([
          { name: 'ok.txt', content: 'x' },
          { name: 'evil', type: 'symlink', linkname },
        ]),
      );
      expect(res.status, linkname).toBe(400);
      expect(JSON.stringify(res.body)).toMatch(
        /symlink (to an absolute path|escaping the destination) refused: evil/,
      );
    }
    expect((await sh(id, 'ls /dest 2>&1; echo rc=$?')).stdout).toMatch(/No such file or directory\nrc=1/);
  });

  it('file errors say which: 404 missing, 409 is a directory / not a directory; a directory is never replaced by a file', async () => {
    const id = await session();
    await sh(id, 'mkdir -p /w/victim && echo keep > /w/victim/keep && echo f > /w/afile');
    expect(errorOf(await get(id, 'file', '/w/missing'))).toEqual({ status: 404, code: 'E_FILE_NOT_FOUND' });
    expect(errorOf(await get(id, 'archive', '/w/missing'))).toEqual({
      status: 404,
      code: 'E_FILE_NOT_FOUND',
    });
    expect(errorOf(await get(id, 'file', '/w/victim'))).toEqual({ status: 409, code: 'E_IS_A_DIRECTORY' });
    expect(errorOf(await get(id, 'file', '/w/afile/x'))).toEqual({ status: 409, code: 'E_NOT_A_DIRECTORY' });
    expect(errorOf(await put(id, '/w/afile', await tarOf([{ name: 'x.txt', content: 'x' }])))).toEqual({
      status: 409,
      code: 'E_NOT_A_DIRECTORY',
    });
    // A file (or a link) where a directory is: refused, the directory and its contents still there.
    expect(errorOf(await put(id, '/w', await tarOf([{ name: 'victim', content: 'replaced?' }])))).toEqual({
      status: 409,
      code: 'E_IS_A_DIRECTORY',
    });
    expect(
      errorOf(await put(id, '/w', await tarOf([{ name: 'victim', type: 'symlink', linkname: 'afile' }]))),
    ).toEqual({ status: 409, code: 'E_IS_A_DIRECTORY' });
    const file = await s.client.call<ApiErr>('PUT', `/v1/sessions/${id}/file?path=/w/victim`, {
      raw: Buffer.from('replaced?'),
    });
    expect(errorOf(file)).toEqual({ status: 409, code: 'E_IS_A_DIRECTORY' });
    expect((await sh(id, 'cat /w/victim/keep')).stdout).toBe('keep\n');
  });

  it('file I/O as a user: a non-root user is denied a root-only 0600 file and a root-owned folder; what it writes is its own', async () => {
    const id = await session();
    await sh(
      id,
      'mkdir -p /data && echo top-secret > /data/root-only && chmod 600 /data/root-only && chmod 755 /data && mkdir -m 1777 /shared',
    );
    expect((await bytesOf(id, 'file', '/data/root-only')).toString()).toBe('top-secret\n');
    expect(errorOf(await get(id, 'file', '/data/root-only', '&user=1000'))).toEqual({
      status: 403,
      code: 'E_PERMISSION_DENIED',
    });
    expect(errorOf(await get(id, 'archive', '/data/root-only', '&user=1000'))).toEqual({
      status: 403,
      code: 'E_PERMISSION_DENIED',
    });
    expect(errorOf(await get(id, 'archive', '/data', '&user=1000'))).toEqual({
      status: 403,
      code: 'E_PERMISSION_DENIED',
    });
    const denied = await s.client.call<ApiErr>(
      'PUT',
      '/v1/sessions/' + id + '/file?path=/data/new&user=1000',
      { raw: Buffer.from('x') },
    );
    expect(errorOf(denied)).toEqual({ status: 403, code: 'E_PERMISSION_DENIED' });
    expect(
      errorOf(await put(id, '/data/sub', await tarOf([{ name: 'x', content: 'x' }]), '&user=1000')),
    ).toEqual({ status: 403, code: 'E_PERMISSION_DENIED' });
    expect((await sh(id, 'ls /data')).stdout).toBe('root-only\n');

    expect(
      (
        await put(
          id,
          '/shared/up',
          await tarOf([{ name: 'mine.sh', mode: 0o755, content: 'x' }]),
          '&user=1000',
        )
      ).status,
    ).toBe(200);
    const put1000 = await s.client.call(
      'PUT',
      `/v1/sessions/${id}/file?path=/shared/one.bin&user=1000:1000&mode=0700`,
      { raw: Buffer.from([1, 2, 3]) },
    );
    expect(put1000.status).toBe(200);
    expect((await sh(id, 'stat -c "%n %u %a" /shared/up /shared/up/mine.sh /shared/one.bin')).stdout).toBe(
      '/shared/up 1000 755\n/shared/up/mine.sh 1000 755\n/shared/one.bin 1000 700\n',
    );
    expect(errorOf(await get(id, 'file', '/shared/one.bin', '&user=bad%20user'))).toEqual({
      status: 400,
      code: 'E_REQUEST_INVALID',
    });
    expect(errorOf(await get(id, 'file', '/shared/one.bin', '&user=nosuchuser'))).toEqual({
      status: 400,
      code: 'E_USER_UNKNOWN',
    });
    expect((await bytesOf(id, 'file', '/shared/one.bin')).length).toBe(3);
  });

  it('single-file routes: raw bytes in and out, byte-exact; secrets redacted on the way out', async () => {
    const id = await session({ environment: { API_KEY: '${RG_TEST_SECRET}' } });
    const bytes = randomBytes(3 * 1024 * 1024);
    const up = await s.client.call<{ bytes: number; path: string }>(
      'PUT',
      `/v1/sessions/${id}/file?path=/w/deep/blob.bin&mode=0755`,
      { raw: bytes },
    );
    expect(up.body).toEqual({ path: '/w/deep/blob.bin', bytes: bytes.length });
    expect(
      (await sh(id, 'sha256sum /w/deep/blob.bin | cut -d" " -f1; stat -c %a /w/deep/blob.bin')).stdout,
    ).toBe(`${createHash('sha256').update(bytes).digest('hex')}\n755\n`);
    const down = await get(id, 'file', '/w/deep/blob.bin');
    expect(down.headers['content-type']).toBe('application/octet-stream');
    expect(Buffer.compare(down.body as Buffer, bytes)).toBe(0);
    await sh(id, 'echo "key=$API_KEY" > /w/key.txt');
    expect((await bytesOf(id, 'file', '/w/key.txt')).toString()).toBe('key=[REDACTED]\n');
    expect((await bytesOf(id, 'archive', '/w/key.txt')).toString('latin1')).not.toContain(SECRET);
    expect(
      errorOf(
        await s.client.call('PUT', `/v1/sessions/${id}/file?path=/w/x&mode=999`, { raw: Buffer.from('x') }),
      ),
    ).toEqual({ status: 400, code: 'E_REQUEST_INVALID' });
  });
});
