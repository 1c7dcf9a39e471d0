import { execFileSync } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectNoContainersLeft, startTestServer, type TestServer } from '../../src/testing/index.js';
import { DRIVER_IMAGE, noDocker } from '../support/docker.js';
import { tarOf } from '../support/tar.js';

/**
 * The server's own disk full (issue 39, "every bad input a clear 4xx": a full disk is not the request's fault): its
 * data folder on a 4 MiB tmpfs, through the real server and engine. An archive upload whose checked copy does not
 * fit, and downloads whose spooled copy does not, are answered 507 E_NO_SPACE (before: the upload a 400 refusal,
 * the downloads a 500), with no path of the host in the answer; nothing of the upload reaches the container, no
 * spooled file is left behind, and the next request that fits succeeds.
 */

const RUN = `it-serve-disk-full-${randomUUID().slice(0, 8)}`;
const LABEL = { 'it.serve-disk-full': RUN };
const skip = process.getuid?.() !== 0 ? 'needs root to mount a tmpfs' : noDocker ? 'no Docker engine' : null;

interface ApiErr {
  error: { code: string; message: string; issues: unknown[] };
}

let work = '';
let data = '';
let s: TestServer | undefined;

if (skip !== null) {
  describe.skip(`serve with a full data disk: ${skip}`, () => {
    it('needs root and Docker', () => undefined);
  });
} else {
  describe("serve: the server's own disk full is 507 E_NO_SPACE, real engine", () => {
    beforeAll(async () => {
      work = await mkdtemp(join(tmpdir(), 'rg-serve-full-'));
      data = join(work, 'data');
      await mkdir(data);
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=4m,mode=0700', 'tmpfs', data]);
      s = await startTestServer({ workDir: work, clientMode: 'raw' });
    });
    afterAll(async () => {
      await s?.dispose();
      await expectNoContainersLeft(LABEL);
      if (data !== '') execFileSync('umount', [data]);
      await rm(work, { recursive: true, force: true });
    });

    it('an upload whose checked copy does not fit, and downloads whose spooled copy does not: 507, nothing half-done', async () => {
      const server = s!;
      const created = await server.client.call<{ session_id: string }>('POST', '/v1/sessions', {
        body: { image: DRIVER_IMAGE, labels: LABEL },
      });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      const id = created.body.session_id;
      const exec = async (command: string): Promise<string> => {
        const res = await server.client.call<{ stdout: string; return_code: number }>(
          'POST',
          `/v1/sessions/${id}/exec`,
          { body: { command } },
        );
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        return res.body.stdout;
      };
      const expectNoSpace = (res: { status: number; body: unknown }): void => {
        const text = JSON.stringify(res.body);
        expect(res.status, text).toBe(507);
        expect((res.body as ApiErr).error.code).toBe('E_NO_SPACE');
        expect(text).not.toContain(work);
        expect(text).not.toMatch(/upload-|download-|checked\.tar|\/tmp\//);
      };

      // 6 MiB of random bytes (no compression helps) into a 4 MiB data folder.
      const big = await tarOf({ 'first.txt': 'first\n', 'big.bin': randomBytes(6 * 1024 * 1024) });
      const upload = await server.client.call('PUT', `/v1/sessions/${id}/archive?path=/tmp/up`, {
        raw: big,
      });
      expectNoSpace(upload);
      // All of it or nothing: not even the first, small file reached the container.
      expect(await exec('ls -A /tmp/up 2>/dev/null | wc -l')).toBe('0\n');
      expect(await readdir(join(data, 'tmp'))).toEqual([]);

      // Downloads spool their copy in the same folder: a file and a folder larger than it.
      await exec('mkdir -p /tmp/down && head -c 6291456 /dev/urandom > /tmp/down/big.bin');
      expectNoSpace(await server.client.call('GET', `/v1/sessions/${id}/file?path=/tmp/down/big.bin`));
      expectNoSpace(await server.client.call('GET', `/v1/sessions/${id}/archive?path=/tmp/down`));
      expect(await readdir(join(data, 'tmp'))).toEqual([]);
      // Many small files: each one's own spool fits, the archive's copy does not (it fails while the files are still
      // read; before, that failure was an unhandled rejection, which ended the whole server).
      await exec(
        'mkdir -p /tmp/many && i=0; while [ $i -lt 1500 ]; do head -c 4096 /dev/urandom > /tmp/many/f$i; i=$((i+1)); done',
      );
      expectNoSpace(await server.client.call('GET', `/v1/sessions/${id}/archive?path=/tmp/many`));
      expect((await server.client.call('GET', '/v1/health')).status).toBe(200);
      expect(await readdir(join(data, 'tmp'))).toEqual([]);
      // The readers in the container were stopped with the spool, not left blocked on a pipe nobody reads.
      const readers = async (): Promise<string> =>
        exec("ps -o args | grep -c -e '^cat /tmp/down' -e '^tar -c' || true");
      for (let i = 0; i < 20 && (await readers()) !== '0\n'; i += 1)
        await new Promise((resolve) => setTimeout(resolve, 100));
      expect(await readers()).toBe('0\n');

      // The server goes on: what fits is taken and given back.
      const small = await tarOf({ 'ok.txt': 'fits\n' });
      const ok = await server.client.call('PUT', `/v1/sessions/${id}/archive?path=/tmp/up`, { raw: small });
      expect(ok.status, JSON.stringify(ok.body)).toBe(200);
      expect(await exec('cat /tmp/up/ok.txt')).toBe('fits\n');
      const back = await server.client.call<Buffer>('GET', `/v1/sessions/${id}/file?path=/tmp/up/ok.txt`);
      expect(back.status).toBe(200);
      expect(Buffer.from(back.body).toString()).toBe('fits\n');

      const deleted = await server.client.call('DELETE', `/v1/sessions/${id}`);
      expect(deleted.status, JSON.stringify(deleted.body)).toBe(200);
    });
  });
}
