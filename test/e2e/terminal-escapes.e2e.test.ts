// An image whose USER holds terminal escapes: `pair run` used to print the engine's message raw, so the terminal
// erased the failure line and drew `pair x completed` over it. Every string from the engine or a pair now reaches
// the terminal through one choke point (src/cli/base-command.ts) with its controls shown escaped.
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tarFs from 'tar-fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../support/cli.js';
import { DRIVER_IMAGE, noDocker, runtime } from '../support/docker.js';

const HOSTILE_USER = '\u001b[2K\rpair x completed\u009b31m\u0007';
const TAG = `roboguide-test/escape-user:${randomUUID().slice(0, 8)}`;
/** Raw controls a terminal would run: C0 but tab and newline, DEL, C1. */
// eslint-disable-next-line no-control-regex -- control characters are what must not be printed raw
const RAW_CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/;

let dir: string;

async function buildHostileImage(context: string): Promise<void> {
  await writeFile(join(context, 'Dockerfile'), `FROM ${DRIVER_IMAGE}\nARG U\nUSER $U\n`);
  const docker = runtime().docker;
  const stream = await docker.buildImage(tarFs.pack(context) as unknown as NodeJS.ReadableStream, {
    t: TAG,
    buildargs: { U: HOSTILE_USER },
    rm: true,
    forcerm: true,
  });
  const events = await new Promise<{ error?: string }[]>((resolve, reject) =>
    docker.modem.followProgress(stream, (err: Error | null, out: { error?: string }[]) =>
      err ? reject(err) : resolve(out),
    ),
  );
  const failed = events.find((e) => e.error !== undefined);
  if (failed) throw new Error(`set-up: the image did not build: ${failed.error}`);
  const user = ((await docker.getImage(TAG).inspect()) as { Config?: { User?: string } }).Config?.User;
  if (user !== HOSTILE_USER) throw new Error(`set-up: the image's USER is ${JSON.stringify(user)}`);
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-escapes-'));
  if (!noDocker) await buildHostileImage(await mkdtemp(join(dir, 'context-')));
}, 120_000);

afterAll(async () => {
  if (!noDocker)
    await runtime()
      .docker.getImage(TAG)
      .remove({ force: true })
      .catch(() => undefined);
  await rm(dir, { recursive: true, force: true });
});

describe.skipIf(noDocker)('terminal escapes from the engine and the pair', () => {
  it('pair run with an image whose USER holds ESC [2K, CR and a C1 CSI: the output has none of them raw and still names the failure; --json keeps the value', async () => {
    const spec = join(dir, 'spec.json');
    await writeFile(
      spec,
      JSON.stringify({
        job_id: 'esc',
        argv: ['/opt/driver/run'],
        cwd: join(dir, 'cwd'),
        outcome_path: join(dir, 'out', 'o.json'),
        environment: {},
        ports: [],
        timeout_seconds: 60,
        image: TAG,
      }),
    );
    const run = await cli(['pair', 'run', '--spec', spec, '--output', join(dir, 'evidence')]);
    const printed = run.stdout + run.stderr;
    expect(printed, printed).not.toMatch(RAW_CONTROL);
    // The failure is still named, and the hostile text is there, visibly escaped.
    expect(run.code).not.toBe(0);
    expect(printed).toMatch(/infrastructure_failure|engine_start_failed|failed/);
    expect(printed).toContain('\\x1b[2K\\x0dpair x completed\\x9b31m\\x07');
    expect(printed).not.toMatch(/^pair x completed/m);

    const json = await cli(['pair', 'run', '--spec', spec, '--output', join(dir, 'evidence-json'), '--json']);
    expect(json.stdout).not.toMatch(RAW_CONTROL);
    const result = JSON.parse(json.stdout) as { engine_error?: { message: string } };
    // JSON escapes keep the engine's message as it was (the value), only its bytes on the terminal are inert.
    expect(result.engine_error?.message).toContain(HOSTILE_USER);
  });
});
