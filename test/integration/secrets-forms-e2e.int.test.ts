/**
 * Every encoding end to end (issue 11): the real CLI (`e1-batch start` with its detached supervisor, then `pair
 * run --json`) runs a driver (busybox sh) that prints two `${NAME}` secrets in every form the redactor covers, on
 * stdout and stderr: raw, base64 (3 alignments, standard and url-safe, MIME-wrapped at 64 and 76 columns with LF
 * and CRLF), hex in both cases, percent-encoding of every byte in both cases, form encoding (`+` for space), JSON
 * `\uXXXX` in both cases and `\/`, UTF-16LE/BE. It also writes a secret into its outcome, into a session file's
 * contents and name, and into the name of a symlink that extraction refuses. Then every byte under the output
 * directories, status, SUMMARY and the CLI's stdout/stderr is scanned: zero hits. The host outcome file is the
 * driver's own and keeps what it wrote (checked, not scanned).
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { containersLabelled, DRIVER_IMAGE, noDocker, sweep } from '../support/docker.js';
import { listFilesRecursively, windowsOf } from '../support/files.js';
import { cli } from '../support/cli.js';

const DRAIN_TIMEOUT_MS = 90_000;
const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
const SESSIONS = '/root/.codex/sessions/2026/12/04';

const pick = (n: number): string => [...randomBytes(n)].map((b) => ALNUM[b % ALNUM.length]).join('');
/** With `+`, `/` and a space, so every encoding differs from the raw value. */
const API_TOKEN = `${pick(12)}+${pick(8)}/${pick(6)} ${pick(8)}`;
/** No `/`: it goes into a file name as is. */
const NAME_TOKEN = `${pick(14)}+${pick(14)}`;

/** Shell (busybox) printing every form of the variable named `$1`; forms are computed inside the container. */
const FORMS_FUNCTION = [
  'forms() {',
  '  v=$(eval printf %s "\\"\\$$1\\"")',
  '  printf "raw: %s\\n" "$v"',
  '  for p in "" x xy; do',
  '    printf "b64: %s\\n" "$(printf %s "$p$v" | base64 | tr -d "\\n")"',
  '    printf "b64url: %s\\n" "$(printf %s "$p$v" | base64 | tr -d "\\n=" | tr "+/" "-_")"',
  '  done',
  '  for w in 64 76; do for lead in 0 1 2 17 40; do',
  '    printf "mime:\\n"; printf %s "$(head -c $lead /dev/zero | tr "\\0" A)$v tail" | base64 | tr -d "\\n" | fold -w $w; printf "\\n"',
  '    printf "mime-crlf:\\r\\n"; printf %s "$(head -c $lead /dev/zero | tr "\\0" B)$v tail" | base64 | tr -d "\\n" | fold -w $w | awk \'{printf "%s\\r\\n", $0}\'',
  '  done; done',
  '  printf "hex: %s\\n" "$(printf %s "$v" | xxd -p | tr -d "\\n")"',
  '  printf "HEX: %s\\n" "$(printf %s "$v" | xxd -p | tr -d "\\n" | tr a-f A-F)"',
  '  printf "pct: %s\\n" "$(printf %s "$v" | xxd -p -c1 | awk \'{printf "%%%s", toupper($0)}\')"',
  '  printf "pct-lower: %s\\n" "$(printf %s "$v" | xxd -p -c1 | awk \'{printf "%%%s", $0}\')"',
  '  printf "form: k=%s&x=1\\n" "$(printf %s "$v" | sed "s/+/%2B/g; s#/#%2F#g; s/ /+/g")"',
  '  printf "{\\"u\\":\\"%s\\"}\\n" "$(printf %s "$v" | xxd -p -c1 | awk \'{printf "\\\\u00%s", $0}\')"',
  '  printf "{\\"U\\":\\"%s\\"}\\n" "$(printf %s "$v" | xxd -p -c1 | awk \'{printf "\\\\u00%s", toupper($0)}\')"',
  '  printf "{\\"s\\":\\"%s\\"}\\n" "$(printf %s "$v" | sed "s#/#\\\\\\\\/#g")"',
  '  printf "utf16le: "; printf %s "$v" | xxd -p -c1 | awk \'{printf "%s00", $0}\' | xxd -r -p; printf "\\n"',
  '  printf "utf16be: "; printf %s "$v" | xxd -p -c1 | awk \'{printf "00%s", $0}\' | xxd -r -p; printf "\\n"',
  '}',
].join('\n');

function driverScript(): string {
  return [
    FORMS_FUNCTION,
    'forms API_TOKEN',
    'forms NAME_TOKEN',
    'forms API_TOKEN >&2',
    'forms NAME_TOKEN >&2',
    `mkdir -p ${SESSIONS}`,
    `forms API_TOKEN > ${SESSIONS}/rollout-forms.jsonl`,
    `printf '{"k":"%s"}\\n' "$NAME_TOKEN" > "${SESSIONS}/rollout-$NAME_TOKEN.jsonl"`,
    `ln -s /etc/passwd "${SESSIONS}/link-$NAME_TOKEN"`,
    'printf \'{"job_id":"%s","infrastructure_failure":false,"fatal_failure":false,"arms":{"a":"%s","%s":["%s"]},"note":"Bearer %s"}\' ' +
      '"$ROBOGUIDE_JOB_ID" "$API_TOKEN" "$NAME_TOKEN" "$NAME_TOKEN" "$API_TOKEN" > "$ROBOGUIDE_OUTCOME_PATH"',
  ].join('\n');
}

/** Every form, computed here with Node's encoders: the needles whose 8-byte windows must not appear. */
function needles(secret: string): string[] {
  const bytes = Buffer.from(secret, 'utf8');
  const base64Inner = [0, 1, 2].flatMap((k) => {
    const b64 = Buffer.concat([Buffer.alloc(k, 0x78), bytes]).toString('base64');
    const inner = b64.slice(Math.ceil((8 * k) / 6), Math.floor((8 * (k + bytes.length)) / 6));
    return [inner, inner.replace(/\+/g, '-').replace(/\//g, '_')];
  });
  const hex = bytes.toString('hex');
  const pct = [...bytes].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('');
  const u = [...bytes].map((b) => `\\u00${b.toString(16).padStart(2, '0')}`).join('');
  const le = Buffer.from(secret, 'utf16le');
  return [
    secret,
    ...base64Inner,
    hex,
    hex.toUpperCase(),
    pct,
    pct.toUpperCase(),
    secret.replace(/\+/g, '%2B').replace(/\//g, '%2F').replace(/ /g, '+'),
    u,
    u.toUpperCase().replace(/\\U/g, '\\u'),
    secret.replace(/\//g, '\\/'),
    le.toString('latin1'),
    Buffer.from(le).swap16().toString('latin1'),
  ];
}

const sleepMs = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe.skipIf(noDocker)('every encoding of every secret, end to end through the CLI (real engine)', () => {
  let work: string;
  let batchId: string | null = null;
  let supervisorPid: number | null = null;
  const env = { API_TOKEN, NAME_TOKEN };

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-secret-forms-'));
    await mkdir(join(work, 'cwd'), { recursive: true });
  });

  afterAll(async () => {
    if (supervisorPid !== null && alive(supervisorPid)) process.kill(supervisorPid, 'SIGKILL');
    if (batchId !== null) await sweep({ 'roboguide.batch': batchId });
    await rm(work, { recursive: true, force: true });
  });

  it('batch and pair run: zero hits in every file written, status, SUMMARY and CLI output', async () => {
    const environment = { API_TOKEN: '${API_TOKEN}', NAME_TOKEN: '${NAME_TOKEN}', MODEL: 'm-1' };
    const job = (id: string) => ({
      job_id: id,
      argv: ['/bin/sh', '-c', driverScript()],
      cwd: join(work, 'cwd'),
      outcome_path: join(work, 'out', `${id}.json`),
      environment,
      timeout_seconds: 60,
    });
    const manifestPath = join(work, 'manifest.json');
    await writeFile(
      manifestPath,
      JSON.stringify({
        schema: 'roboguide.e1.batch/v0.1',
        image: DRIVER_IMAGE,
        jobs: [job('f1')],
        capacity: { max_workers: 1 },
        stop_budget_seconds: 5,
      }),
    );
    const output = join(work, 'D');
    const registry = join(work, 'registry.db');
    const cliOutputs: string[] = [];
    const started = await cli(
      ['e1-batch', 'start', '--manifest', manifestPath, '--output', output, '--registry', registry, '--json'],
      { env: { ...env, ROBOGUIDE_LOG_LEVEL: 'trace' } },
    );
    cliOutputs.push(started.stdout, started.stderr);
    expect(started.code, started.stderr).toBe(0);
    const startJson = JSON.parse(started.stdout) as { batch_id: string; supervisor_pid: number };
    batchId = startJson.batch_id;
    supervisorPid = startJson.supervisor_pid;
    const deadline = Date.now() + DRAIN_TIMEOUT_MS;
    let state = '';
    while (Date.now() < deadline) {
      const s = await cli(['e1-batch', 'status', '--output', output, '--json']);
      cliOutputs.push(s.stdout, s.stderr);
      state = (JSON.parse(s.stdout) as { state: string }).state;
      if (state === 'drained' || state === 'paused') break;
      await sleepMs(500);
    }
    expect(state).toBe('drained');
    while (alive(supervisorPid) && Date.now() < deadline + 10_000) await sleepMs(100);
    const human = await cli(['e1-batch', 'status', '--output', output]);
    cliOutputs.push(human.stdout, human.stderr);
    expect(await containersLabelled({ 'roboguide.batch': batchId })).toEqual([]);

    // The same driver through `pair run --json`: its printed result carries the (masked) outcome.
    const specPath = join(work, 'pair.json');
    await writeFile(specPath, JSON.stringify({ ...job('p1'), image: DRIVER_IMAGE }));
    const pairOutput = join(work, 'P');
    const pair = await cli(
      ['pair', 'run', '--spec', specPath, '--output', pairOutput, '--registry', registry, '--json'],
      { env: { ...env, ROBOGUIDE_LOG_LEVEL: 'trace' } },
    );
    cliOutputs.push(pair.stdout, pair.stderr);
    expect(pair.code, pair.stderr).toBe(0);

    // Masking positively happened where it had to.
    const result = JSON.parse(await readFile(join(output, 'jobs/f1/result.json'), 'utf8')) as {
      classification: string;
      outcome: { arms: Record<string, unknown>; note: string };
      outcome_redactions: number;
      outcome_sha256: string;
      sessions: { files: number; refusals: string[] };
    };
    expect(result.classification).toBe('completed');
    expect(result.outcome.arms['a']).toBe('[REDACTED]');
    expect(result.outcome_redactions).toBe(4);
    expect(result.sessions.files).toBe(2);
    expect(result.sessions.refusals).toEqual([
      expect.stringMatching(/^symlink refused: .*link-\[REDACTED\]$/),
    ]);
    const printed = JSON.parse(pair.stdout) as {
      outcome: { arms: Record<string, unknown> };
      outcome_redactions: number;
    };
    expect(printed.outcome.arms['a']).toBe('[REDACTED]');
    expect(printed.outcome_redactions).toBe(4);
    const sessionNames = (await listFilesRecursively(join(output, 'jobs/f1/sessions'))).map((f) =>
      f.slice(f.lastIndexOf('/') + 1),
    );
    expect(sessionNames.sort()).toEqual(['rollout-[REDACTED].jsonl', 'rollout-forms.jsonl']);
    // The host outcome file is the driver's own: kept as written. The evidence copy (the pair's private folder) is
    // masked, and outcome_sha256 covers the bytes kept there (so reconciliation could check them).
    expect(await readFile(join(work, 'out', 'f1.json'), 'utf8')).toContain(API_TOKEN);
    const kept = await readFile(join(output, 'jobs/f1/outcome/f1.json'));
    expect(kept.toString('utf8')).toContain('[REDACTED');
    expect(createHash('sha256').update(kept).digest('hex')).toBe(result.outcome_sha256);

    const windows = windowsOf([...needles(API_TOKEN), ...needles(NAME_TOKEN)], 8);
    const files = [...(await listFilesRecursively(output)), ...(await listFilesRecursively(pairOutput))];
    expect(files).toEqual(
      expect.arrayContaining([
        join(output, 'status.json'),
        join(output, 'SUMMARY.json'),
        join(output, 'events.jsonl'),
        join(output, 'supervisor.log'),
      ]),
    );
    const hits: string[] = [];
    let bytesScanned = 0;
    const scan = (text: string, label: string): void => {
      bytesScanned += text.length;
      for (const t of [text, text.replace(/\r?\n/g, '')])
        for (const w of windows) if (t.includes(w)) hits.push(`${label}: ${JSON.stringify(w)}`);
    };
    for (const f of files) scan((await readFile(f)).toString('latin1'), f);
    cliOutputs.forEach((text, i) => scan(Buffer.from(text, 'utf8').toString('latin1'), `CLI output #${i}`));
    const stdoutLog = await readFile(join(output, 'jobs/f1/stdout.log'), 'latin1');
    expect(stdoutLog.match(/\[REDACTED/g)?.length ?? 0).toBeGreaterThan(60);
    console.info(
      `secrets-forms-e2e: ${files.length} files + ${cliOutputs.length} CLI outputs, ${bytesScanned} bytes, ${windows.length} windows, ${hits.length} hits`,
    );
    expect([...new Set(hits)]).toEqual([]);
  });
});
