import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readStatus } from '../../../src/app/batch/read-status.js';
import { renderStatus } from '../../../src/cli/status-view.js';
import { EGRESS_LIVE_READ_BYTES } from '../../../src/core/egress/egress-live.js';
import type { EgressRecord } from '../../../src/core/egress/record.js';
import { jsonTerminalSafe, terminalSafe } from '../../../src/core/terminal-text.js';
import {
  claimJob,
  finishJob,
  recordSupervisor,
  startTestBatch,
  type TestBatch,
} from '../../support/batch-dir.js';

const alive = { isAlive: () => true };
const now = new Date('2026-12-02T10:05:00Z');

const record = (decision: EgressRecord['decision'], host: string | null, port = 443): EgressRecord => ({
  time: '2026-12-02T10:00:03.000Z',
  via: host === null ? 'tcp' : 'connect',
  host,
  address: host === null ? '198.18.1.11' : '198.18.1.10',
  port,
  method: null,
  decision,
  bytes_up: 0,
  bytes_down: 0,
  source: '172.30.0.2',
});
const lines = (records: readonly EgressRecord[]) => records.map((r) => `${JSON.stringify(r)}\n`).join('');

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-egress-running-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Jobs a, b, c, d claimed under a live supervisor; d finished allowlisted (1 allowed, 1 refused). */
async function batchWithRunning(): Promise<TestBatch> {
  const batch = await startTestBatch(dir, { jobs: ['a', 'b', 'c', 'd'] });
  for (const id of ['a', 'b', 'c']) await claimJob(batch, id);
  const d = await claimJob(batch, 'd');
  await finishJob(batch, d, {
    egress: {
      mode: 'allowlist',
      allowed: 1,
      refused: 1,
      hosts: ['ok.test:443'],
      refused_hosts: ['old.test:443'],
    },
  });
  await recordSupervisor(batch, { pid: process.pid, start_ticks: null, boot_id: null });
  return batch;
}

describe('refused egress attempts of running pairs in status (issue 42 item 4)', () => {
  it('counts a running pair live from its egress.jsonl, apart from the finished pairs, torn line and missing file ignored', async () => {
    const batch = await batchWithRunning();
    // a: allowed twice, refused twice (a host with a terminal escape, masked on disk already), and a torn last line.
    await writeFile(
      join(batch.output, 'jobs/a/egress.jsonl'),
      lines([
        record('allowed', 'ok.test'),
        record('refused', 'evil.test'),
        record('allowed', 'ok.test'),
        record('refused', null, 80),
      ]) +
        lines([record('refused', '\x1b]0;pwned\x07x.test')]) +
        '{"time":"2026-12-02T10:00:04',
    );
    // b: allowlisted, nothing refused yet. c: no egress.jsonl (not allowlisted): counts as none.
    await writeFile(join(batch.output, 'jobs/b/egress.jsonl'), lines([record('allowed', 'ok.test')]));

    const status = await readStatus(batch.store, undefined, now, alive);
    expect(status.running.map((r) => r.job_id).sort()).toEqual(['a', 'b', 'c']);
    // The finished pair's figures stay final; the running ones are apart, each marked running.
    expect(status.egress).toMatchObject({ pairs: 1, allowed: 1, refused: 1 });
    expect(status.egress?.running).toEqual({
      pairs: 2,
      allowed: 3,
      refused: 3,
      refused_pairs: [
        {
          job_id: 'a',
          running: true,
          allowed: 2,
          refused: 3,
          refused_hosts: ['\x1b]0;pwned\x07x.test:443', '198.18.1.11:80', 'evil.test:443'],
        },
      ],
    });

    const text = terminalSafe(renderStatus(status, now));
    expect(text).toContain('egress: 1 refused attempt, 1 allowed, over 1 allowlisted pair');
    expect(text).toContain(
      'egress (running, so far): 3 refused attempts, 3 allowed, over 2 running allowlisted pairs',
    );
    expect(text).toMatch(
      / {2}egress a \(running\) {2}refused 3 {2}allowed 2 {2}\(.*x\.test:443, 198\.18\.1\.11:80, evil\.test:443\)/,
    );
    expect(text).not.toContain('\x1b');
    expect(text).not.toContain('\x07');
    const json = jsonTerminalSafe(JSON.stringify(status));
    expect(json).not.toContain('\x1b');
    expect(JSON.parse(json)).toMatchObject({ egress: { running: { refused: 3 } } });
  });

  it('reads only the tail of a long egress.jsonl and says so (partial); no running pair allowlisted: no running', async () => {
    const batch = await batchWithRunning();
    const filler = lines(Array.from({ length: 3000 }, () => record('refused', 'early.test')));
    expect(filler.length).toBeGreaterThan(EGRESS_LIVE_READ_BYTES);
    await writeFile(
      join(batch.output, 'jobs/a/egress.jsonl'),
      filler + lines([record('refused', 'late.test'), record('allowed', 'ok.test')]),
    );
    const status = await readStatus(batch.store, undefined, now, alive);
    const running = status.egress?.running;
    expect(running).toMatchObject({ pairs: 1, allowed: 1, partial: true });
    // Only whole records of the last EGRESS_LIVE_READ_BYTES: fewer than were written, never a cut one.
    const perLine = Buffer.byteLength(lines([record('refused', 'early.test')]));
    expect(running?.refused).toBe(
      Math.floor(
        (EGRESS_LIVE_READ_BYTES -
          Buffer.byteLength(lines([record('refused', 'late.test'), record('allowed', 'ok.test')]))) /
          perLine,
      ) + 1,
    );
    expect(running?.refused_pairs[0]).toMatchObject({
      job_id: 'a',
      running: true,
      partial: true,
      refused_hosts: ['early.test:443', 'late.test:443'],
    });
    expect(renderStatus(status, now)).toContain('egress a (running, last 256 KiB)');

    // No running pair has an egress.jsonl: status as before (the finished figures only).
    await rm(join(batch.output, 'jobs/a/egress.jsonl'));
    const plain = await readStatus(batch.store, undefined, now, alive);
    expect(plain.egress).toEqual({
      pairs: 1,
      allowed: 1,
      refused: 1,
      refused_pairs: [expect.objectContaining({ job_id: 'd' })],
      more: 0,
    });
    expect(renderStatus(plain, now)).not.toContain('running, so far');
  });
});
