// The test kit's sweep against records planted by another local user (issue: containment, round two). Root's sweep
// used to trust whatever lay in $TMPDIR/roboguide-testkit-<uid>/servers: a record there made it kill a root
// process, remove a foreign container and delete a root-owned folder. Each test plants such a record and checks that
// nothing it names is touched.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmod, chown, mkdir, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { GenericContainer, type StartedTestContainer } from 'testcontainers';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { currentProcessIdentity, readProcessStartTicks } from '../../src/adapters/host-identity.js';
import { sweepTestKitLeftovers } from '../../src/testing/leftovers.js';
import { TestKitStateError } from '../../src/testing/state-dir.js';
import { noDocker, runtime, sweep } from '../support/docker.js';

const RUN = { 'roboguide.test': `kit-hostile-${randomUUID().slice(0, 8)}` };
const VICTIM_BATCH = `serve-${randomUUID().replaceAll('-', '').slice(0, 12)}`;
const NOBODY = 65534;
const realTmp = tmpdir();

let victimDir: string;
let victimProcess: ChildProcess;
let victimContainer: StartedTestContainer;
let base: string;
const saved = { TMPDIR: process.env['TMPDIR'], XDG_RUNTIME_DIR: process.env['XDG_RUNTIME_DIR'] };

/** A record naming the victims, with an owner that is gone (so today's sweep acts on it at once). */
async function plantedRecord(): Promise<string> {
  const me = await currentProcessIdentity();
  return JSON.stringify({
    owner: { ...me, pid: 2 ** 22 - 3, start_ticks: '1', host: hostname() },
    server: {
      pid: victimProcess.pid,
      start_ticks: await readProcessStartTicks(victimProcess.pid!),
      boot_id: me.boot_id,
    },
    batchId: VICTIM_BATCH,
    socketPath: join(victimDir, 'api.sock'),
    tempWorkDir: victimDir,
    token: 'a'.repeat(32),
  });
}

/** `<base>/roboguide-testkit-<uid>/servers/<batch>.json` holding the planted record, owned by `owner`. */
async function plant(root: string, owner: number, mode: number): Promise<void> {
  const servers = join(root, 'servers');
  await mkdir(servers, { recursive: true, mode });
  await writeFile(join(servers, `${VICTIM_BATCH}.json`), await plantedRecord(), { mode: 0o644 });
  for (const path of [root, servers, join(servers, `${VICTIM_BATCH}.json`)]) await chown(path, owner, owner);
  await chmod(root, mode);
  await chmod(servers, mode);
}

async function expectVictimsUntouched(): Promise<void> {
  expect(victimProcess.exitCode).toBeNull();
  expect(victimProcess.signalCode).toBeNull();
  expect((await runtime().inspect(victimContainer.getId()))?.status).toBe('running');
  expect(await readdir(victimDir)).toEqual(['keep.txt']);
}

const kitDir = (): string => join(base, `roboguide-testkit-${process.getuid?.() ?? 0}`);

beforeAll(async () => {
  victimDir = await mkdtemp(join(realTmp, 'rg-kit-victim-'));
  await writeFile(join(victimDir, 'keep.txt'), 'root-owned, not the kit’s');
  // A root process that even looks like a serve of that socket (argv), so only the record's proof protects it.
  victimProcess = spawn(
    process.execPath,
    ['-e', 'setTimeout(() => {}, 600000)', 'serve', '--socket', join(victimDir, 'api.sock')],
    { stdio: 'ignore' },
  );
  victimContainer = await new GenericContainer('roboguide/pair-driver:1')
    .withCommand(['sleep', '600'])
    .withNetworkMode('none')
    .withLabels({ ...RUN, 'roboguide.batch': VICTIM_BATCH })
    .start();
}, 60_000);

afterAll(async () => {
  victimProcess.kill('SIGKILL');
  await sweep(RUN);
  await rm(victimDir, { recursive: true, force: true });
});

beforeEach(async () => {
  base = await mkdtemp(join(realTmp, 'rg-kit-base-'));
  await chmod(base, 0o1777); // like /tmp
  process.env['TMPDIR'] = base;
  delete process.env['XDG_RUNTIME_DIR'];
});

afterEach(async () => {
  for (const [name, value] of Object.entries(saved)) {
    if (value === undefined) delete process.env[name];
    else process.env[name] = value;
  }
  await rm(base, { recursive: true, force: true });
});

describe.skipIf(noDocker)(
  'the test kit sweep refuses a state folder or record that is not provably ours',
  () => {
    it('a state folder owned by uid 65534 (planted by another local user): refused by name, nothing it names is touched', async () => {
      await plant(kitDir(), NOBODY, 0o700);
      const err: unknown = await sweepTestKitLeftovers().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(TestKitStateError);
      expect(String(err)).toMatch(/roboguide-testkit-\d+ is owned by uid 65534, not by this user/);
      await expectVictimsUntouched();
    });

    it('a state folder of ours with mode 0777 (anyone can plant a record): refused, nothing touched', async () => {
      await plant(kitDir(), process.getuid?.() ?? 0, 0o777);
      const err: unknown = await sweepTestKitLeftovers().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(TestKitStateError);
      expect(String(err)).toMatch(/has mode 0777, not 0700/);
      await expectVictimsUntouched();
    });

    it('a state folder that is a link (to a folder of ours, 0700): refused, nothing touched', async () => {
      const elsewhere = join(base, 'elsewhere');
      await plant(elsewhere, process.getuid?.() ?? 0, 0o700);
      await symlink(elsewhere, kitDir());
      const err: unknown = await sweepTestKitLeftovers().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(TestKitStateError);
      expect(String(err)).toMatch(/roboguide-testkit-\d+ is a symbolic link/);
      await expectVictimsUntouched();
    });

    it('a forged record in a state folder of ours: not acted on (its work folder holds no kit marker), reported as refused', async () => {
      await plant(kitDir(), process.getuid?.() ?? 0, 0o700);
      const report = await sweepTestKitLeftovers();
      expect(report.containers).toEqual([]);
      expect(report.servers).toEqual([]);
      expect(report.refused).toEqual([
        {
          record: join(kitDir(), 'servers', `${VICTIM_BATCH}.json`),
          reason: expect.stringMatching(/has no test kit marker/) as string,
        },
      ]);
      await expectVictimsUntouched();
    });
  },
);
