import { cp, mkdtemp, readdir, readFile, rm, utimes, writeFile } from 'node:fs/promises';
import { zstdCompressSync } from 'node:zlib';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { diagnoseSessionsReport } from '../../src/library.js';
import { PROVIDER_FAILURE_SCHEMA } from '../../src/core/result.js';

/**
 * The diagnosis of every rollout the REAL Codex CLI wrote (test/fixtures/codex, made by
 * `npm run fixtures:codex`; see its README): version × case → provider failure and whether a
 * turn end was recorded. Read through the real adapter, as `diagnose sessions --dir` does.
 */

const FIXTURES = fileURLToPath(new URL('../fixtures/codex/', import.meta.url));
const CASES = [
  '429',
  '500',
  '503',
  'usage_limit',
  'stream_rate_limit',
  'dropped_stream',
  'success',
  'interrupted',
  'app_server_429', // through `codex app-server` with persistExtendedHistory
] as const;
type Case = (typeof CASES)[number];

const f = (kind: string, httpStatus: number | null = null) => ({
  schema: PROVIDER_FAILURE_SCHEMA,
  kind,
  http_status: httpStatus,
});
/** [provider_failure, turn_end_found] */
type Expected = readonly [ReturnType<typeof f> | null, boolean];
const NOTHING: Expected = [null, false];
const ENDED: Expected = [null, true];

const TABLE: Record<string, Record<Case, Expected>> = {
  // Since 0.145 the failure is inside the turn's task_complete (`error.codex_error_info`).
  '0.171.0': {
    '429': [f('response_too_many_failed_attempts', 429), true],
    '500': [f('internal_server_error'), true],
    '503': [f('http_connection_failed', 503), true],
    usage_limit: [f('usage_limit_exceeded'), true],
    stream_rate_limit: [f('rate_limit_exceeded'), true],
    dropped_stream: ENDED, // codex_error_info "other": not a named provider failure
    success: ENDED,
    interrupted: ENDED, // turn_aborted (interrupted), no error
    app_server_429: [f('response_too_many_failed_attempts', 429), true],
  },
  // 0.125–0.144 (and 0.124 in exec mode) end a failed turn with task_complete and nothing else.
  '0.144.6': {
    '429': ENDED,
    '500': ENDED,
    '503': ENDED,
    usage_limit: ENDED,
    stream_rate_limit: ENDED,
    dropped_stream: ENDED,
    success: ENDED,
    interrupted: ENDED,
    app_server_429: ENDED,
  },
  '0.124.0': {
    '429': ENDED,
    '500': ENDED,
    '503': ENDED,
    usage_limit: ENDED,
    stream_rate_limit: ENDED,
    dropped_stream: ENDED,
    success: ENDED,
    interrupted: ENDED,
    // A separate error line (no turn_id) between the turn's task_started and its error-less task_complete.
    app_server_429: [f('response_too_many_failed_attempts', 429), true],
  },
  // 0.60 and 0.93 write no task events, except turn_aborted (without turn_id) on an interrupt.
  '0.93.0': {
    '429': NOTHING,
    '500': NOTHING,
    '503': NOTHING,
    usage_limit: NOTHING,
    stream_rate_limit: NOTHING,
    dropped_stream: NOTHING,
    success: NOTHING,
    interrupted: ENDED,
    app_server_429: NOTHING,
  },
  '0.60.1': {
    '429': NOTHING,
    '500': NOTHING,
    '503': NOTHING,
    usage_limit: NOTHING,
    stream_rate_limit: NOTHING,
    dropped_stream: NOTHING,
    success: NOTHING,
    interrupted: ENDED,
    app_server_429: NOTHING,
  },
};

describe('diagnosis of rollouts written by the real Codex CLI', () => {
  it('has a fixture folder for every version and case of the table, and no other', async () => {
    const versions = (await readdir(FIXTURES, { withFileTypes: true }))
      .filter((e) => e.isDirectory())
      .map((e) => e.name);
    expect(versions.sort()).toEqual(Object.keys(TABLE).sort());
    for (const version of versions)
      expect((await readdir(join(FIXTURES, version))).sort()).toEqual([...CASES].sort());
  });

  for (const [version, cases] of Object.entries(TABLE)) {
    it.each(CASES.map((c) => [c, cases[c]] as const))(
      `${version} %s`,
      async (kase, [failure, turnEndFound]) => {
        const report = await diagnoseSessionsReport(join(FIXTURES, version, kase), {
          requireDirectory: true,
        });
        expect(report.provider_failure).toEqual(failure);
        expect(report.turn_end_found).toBe(turnEndFound);
        expect(report.files_read).toBe(1);
        expect(report.files_unreadable).toBe(0);
        expect(report.lines_read).toBeGreaterThan(3);
      },
    );
  }
});

describe('real rollouts across files: the newest turn decides', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'codex-fixtures-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  async function place(version: string, kase: Case, name: string, mtimeSec: number): Promise<void> {
    await cp(join(FIXTURES, version, kase), join(dir, name), { recursive: true });
    for (const file of await readdir(join(dir, name), { recursive: true })) {
      if (String(file).endsWith('.jsonl')) await utimes(join(dir, name, String(file)), mtimeSec, mtimeSec);
    }
  }

  it('a newer successful session supersedes an older 429', async () => {
    await place('0.171.0', '429', 'a', 1_700_000_000);
    await place('0.171.0', 'success', 'b', 1_700_000_100);
    expect((await diagnoseSessionsReport(dir)).provider_failure).toBeNull();
  });

  it('a newer 429 wins over an older success', async () => {
    await place('0.171.0', 'success', 'a', 1_700_000_000);
    await place('0.171.0', '429', 'b', 1_700_000_100);
    const report = await diagnoseSessionsReport(dir);
    expect(report.provider_failure).toEqual(f('response_too_many_failed_attempts', 429));
    expect(report.files_read).toBe(2);
  });

  it('a newer session with no task events falls back to the older one, which decides', async () => {
    await place('0.171.0', '503', 'a', 1_700_000_000);
    await place('0.60.1', 'success', 'b', 1_700_000_100);
    const report = await diagnoseSessionsReport(dir);
    expect(report.provider_failure).toEqual(f('http_connection_failed', 503));
    expect(report.turn_end_found).toBe(true);
  });

  it('a real 0.171 429 rollout compressed as .jsonl.zst (no plain sibling) is diagnosed the same', async () => {
    await place('0.171.0', '429', 'a', 1_700_000_000);
    const [name] = (await readdir(join(dir, 'a'), { recursive: true }))
      .map(String)
      .filter((p) => p.endsWith('.jsonl'));
    const plain = join(dir, 'a', name ?? 'missing');
    await writeFile(`${plain}.zst`, zstdCompressSync(await readFile(plain)));
    await rm(plain);
    const report = await diagnoseSessionsReport(dir);
    expect(report.provider_failure).toEqual(f('response_too_many_failed_attempts', 429));
    expect(report).toMatchObject({ files_read: 1, files_unreadable: 0, turn_end_found: true });
  });
});
