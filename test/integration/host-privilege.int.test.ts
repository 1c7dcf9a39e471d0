import { execFile } from 'node:child_process';
import {
  access,
  chmod,
  copyFile,
  lstat,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  rm,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { pack } from 'tar-stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runPair } from '../../src/app/pair/run-pair.js';
import type { RunPairOutcome } from '../../src/app/pair/run-pair-types.js';
import type { ResultRecord } from '../../src/core/result.js';
import { SECCOMP_SECURITY_OPT } from '../../src/core/seccomp-profile.js';
import { startTestServer } from '../../src/testing/index.js';
import {
  DRIVER_IMAGE,
  engineIsPodman,
  expectNoContainersLeft,
  noDocker,
  pairRunDeps,
  runtime,
} from '../support/docker.js';

/**
 * Host privilege (docs/secrets.md "host privilege"): container root is host root and a pair's cwd is a host folder,
 * so a setuid-root file left there is run later through the host's own mount by any local user. Our seccomp profile
 * must refuse every way to set S_ISUID/S_ISGID from inside (chmod and its variants, a mode at create, mknod, the
 * calls seccomp cannot see into, io_uring, file capabilities, a user namespace); after the pair, any such bit found
 * under its folders (a bypass, or the host) is cleared and recorded. Each proof runs the file on the host as uid
 * 65534. The variants through raw syscalls use a static C helper (test/fixtures/privilege-probe.c) built with `cc`.
 */
const rt = runtime();
const run = promisify(execFile);
const SH = '/bin/sh';
const WRITE_OWN =
  'printf \'{"job_id":"%s","infrastructure_failure":false,"fatal_failure":false,"arms":[]}\' "$ROBOGUIDE_JOB_ID" > "$ROBOGUIDE_OUTCOME_PATH"';
const PROBE_SOURCE = resolve('test/fixtures/privilege-probe.c');
const ENOSYS = 38;
const EPERM = 1;
let work: string;
let probe: string;
/** Whether this kernel takes 32-bit syscalls (kernelTakes32BitCalls). */
let ia32 = true;
const jobs: string[] = [];

const hasCc = await access('/usr/bin/cc').then(
  () => true,
  () => false,
);
if (!hasCc)
  console.warn('\n*** host-privilege: no /usr/bin/cc: the raw-syscall variants cannot be built ***\n');

function pairRun(
  jobId: string,
  script: string,
  prepare?: (cwd: string) => Promise<void>,
): Promise<RunPairOutcome> {
  jobs.push(jobId);
  const dir = join(work, jobId);
  const spec = {
    job_id: jobId,
    argv: [SH, '-c', script],
    cwd: join(dir, 'cwd'),
    outcome_path: join(dir, 'out', 'outcome.json'),
    image: DRIVER_IMAGE,
    timeout_seconds: 120,
    stop_budget_seconds: 2,
  };
  return (async () => {
    await mkdir(spec.cwd, { recursive: true, mode: 0o755 });
    await prepare?.(spec.cwd);
    return runPair(pairRunDeps(rt), {
      specText: JSON.stringify(spec),
      specSource: `${jobId}.json`,
      output: join(dir, 'evidence'),
      bindAddress: '127.0.0.1',
      environment: {},
      codeVersion: 'test',
      cwd: work,
    });
  })();
}

/** Every file below `root` (links not followed) with its permission bits. */
async function modesUnder(root: string): Promise<Map<string, number>> {
  const modes = new Map<string, number>();
  for (const name of await readdir(root, { recursive: true })) {
    const st = await lstat(join(root, name));
    modes.set(name, st.mode & 0o7777);
  }
  return modes;
}

/** Runs a file on the host as uid/gid 65534 with no groups: what a local user gets from it. */
async function asNobody(file: string, ...args: string[]): Promise<string> {
  const out = await run('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', file, ...args]);
  return out.stdout.trim();
}

async function resultOf(outcome: RunPairOutcome): Promise<ResultRecord> {
  return JSON.parse(await readFile(join(outcome.output, 'result.json'), 'utf8')) as ResultRecord;
}

/** A tar holding one file with mode 4755 (extracted with -p, tar restores the mode with chmod). */
async function setuidTar(path: string): Promise<void> {
  const p = pack();
  p.entry({ name: 'from-tar', mode: 0o4755, uid: 0, gid: 0 }, '#!/bin/sh\nid -u\n');
  p.finalize();
  const chunks: Buffer[] = [];
  for await (const chunk of p) chunks.push(chunk as Buffer);
  await writeFile(path, Buffer.concat(chunks));
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'rg-privilege-'));
  // uid 65534 must reach the files it runs.
  await chmod(work, 0o755);
  probe = join(work, 'probe');
  if (hasCc) {
    await run('cc', ['-static', '-no-pie', '-O1', '-o', probe, PROBE_SOURCE]);
    ia32 = await kernelTakes32BitCalls();
    if (!ia32)
      console.warn(
        '\n*** host-privilege: this kernel has no 32-bit syscall entry (int 0x80 kills its caller on the host too): the chmod-ia32 variant is killed, not refused ***\n',
      );
  }
});

/**
 * Whether this kernel takes 32-bit syscalls at all: some turn the entry off (`ia32_emulation=false`, or a VM's kernel),
 * and then `int 0x80` kills the process that makes it, on the host as in a container. Asked on the host with the probe
 * itself, on a file of the test's own.
 */
async function kernelTakes32BitCalls(): Promise<boolean> {
  const target = join(work, 'ia32-check');
  await writeFile(target, '');
  try {
    return await run(probe, ['chmod-ia32', target]).then(
      () => true,
      (err: { signal?: string | null }) => err.signal === null || err.signal === undefined,
    );
  } finally {
    await rm(target, { force: true });
  }
}

afterAll(async () => {
  if (!noDocker) await expectNoContainersLeft(jobs);
  if (process.env['KEEP_WORK'] === undefined) await rm(work, { recursive: true, force: true });
});

/** The helper's variants and the errno each must get: EPERM, or ENOSYS where libc falls back. */
const PROBES: readonly (readonly [variant: string, errno: number, existing: boolean])[] = [
  ['fchmodat', EPERM, true],
  ['fchmod', EPERM, true],
  ['fchmodat2', ENOSYS, true],
  ['chmod-ia32', EPERM, true],
  ['openat', EPERM, false],
  ['open', EPERM, false],
  ['creat', EPERM, false],
  ['mknod-reg', EPERM, false],
  ['mknodat-reg', EPERM, false],
  ['mknod-chr', EPERM, false],
  ['openat2', ENOSYS, false],
  ['io_uring', EPERM, false],
  ['setcap', EPERM, true],
  ['unshare-user', EPERM, false],
  ['userns-setcap', EPERM, true],
  ['clone3', ENOSYS, false],
];

describe.skipIf(noDocker)('host privilege on the real engine', () => {
  it('a pair cannot leave a setuid or setgid file in its cwd: every way is refused inside, and uid 65534 stays 65534', async () => {
    const probes = hasCc
      ? PROBES.map(([v, , existing]) => `${existing ? `: > t-${v}; ` : ''}./helper ${v} t-${v}`).join('; ')
      : 'true';
    const script = [
      'cp /bin/busybox ./busybox; cp ./probe ./helper',
      'chmod 4755 helper; echo "chmod-4755=$?"',
      'chmod u+s helper; echo "chmod-u+s=$?"',
      'chmod g+s busybox; echo "chmod-g+s=$?"',
      'chmod 6755 busybox; echo "chmod-6755=$?"',
      'mknod -m 4755 fifo p; echo "mknod-fifo=$?"',
      'mknod null c 1 3; echo "mknod-chr=$?"',
      'tar -xpf suid.tar; echo "tar-p=$?"',
      'chmod 0700 helper; echo "chmod-0700=$?"; chmod 755 helper',
      probes,
      WRITE_OWN,
    ].join('; ');
    const outcome = await pairRun('setuid-attack', script, async (cwd) => {
      if (hasCc) await copyFile(probe, join(cwd, 'probe'));
      await setuidTar(join(cwd, 'suid.tar'));
    });
    const cwd = join(work, 'setuid-attack', 'cwd');
    const stdout = await readFile(join(outcome.output, 'stdout.log'), 'utf8');
    for (const attempt of [
      'chmod-4755',
      'chmod-u+s',
      'chmod-g+s',
      'chmod-6755',
      'mknod-fifo',
      'mknod-chr',
      'tar-p',
    ])
      expect(stdout).toMatch(new RegExp(`^${attempt.replace('+', '\\+')}=[1-9]`, 'm'));
    // An ordinary mode still goes through.
    expect(stdout).toMatch(/^chmod-0700=0$/m);
    if (hasCc)
      for (const [variant, errno] of PROBES) {
        // Without the 32-bit entry the helper is killed at `int 0x80`: it says nothing, and changed nothing (below).
        if (variant === 'chmod-ia32' && !ia32) expect(stdout).not.toContain(`${variant} rc=`);
        else expect(stdout).toContain(`${variant} rc=-1 errno=${errno}\n`);
      }

    const result = await resultOf(outcome);
    expect(result.classification).toBe('completed');
    // Nothing got through: no file of the pair has a bit the sweep had to clear, and no device node exists.
    expect(result.host_privilege_stripped).toBeUndefined();
    const modes = await modesUnder(cwd);
    expect([...modes].filter(([, mode]) => (mode & 0o6000) !== 0)).toEqual([]);
    // Busybox tar creates the file with its mode (refused: nothing extracted), GNU tar chmods it after (refused).
    expect(modes.get('from-tar') ?? 0).toBe(modes.has('from-tar') ? 0o755 : 0);
    expect(modes.has('null')).toBe(false);
    if (hasCc) expect(await asNobody(join(cwd, 'helper'), 'euid')).toBe('euid=65534 setuid0=-1 uid=65534');
    // busybox drops a setuid bit for most applets; `id -u` is the plain check that nothing changed.
    expect(await asNobody(join(cwd, 'busybox'), 'id', '-u')).toBe('65534');
  });

  it('the second line: setuid/setgid files planted from the host mid-pair are cleared once it ends and recorded', async () => {
    const script = [
      ': > started',
      'i=0; while [ ! -e ready ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done',
      'cp -p planted copied; echo "cp-p=$?"',
      WRITE_OWN,
    ].join('; ');
    const dir = join(work, 'second-line');
    const cwd = join(dir, 'cwd');
    const outcomeDir = join(dir, 'evidence', 'outcome');
    const helper = hasCc ? probe : '/bin/busybox';
    const running = pairRun('second-line', script);
    const deadline = Date.now() + 60_000;
    while (
      !(await access(join(cwd, 'started')).then(
        () => true,
        () => false,
      ))
    ) {
      if (Date.now() > deadline) throw new Error('the pair never started');
      await new Promise((r) => setTimeout(r, 100));
    }
    // Planted by the host while the pair runs: as a bypass of the profile would leave them.
    await copyFile(helper, join(cwd, 'planted'));
    await chmod(join(cwd, 'planted'), 0o4755);
    await mkdir(join(cwd, 'deep', 'er'), { recursive: true });
    await copyFile(helper, join(cwd, 'deep', 'er', 'sgid'));
    await chmod(join(cwd, 'deep', 'er', 'sgid'), 0o2711);
    await copyFile(helper, join(outcomeDir, 'in-outcome'));
    await chmod(join(outcomeDir, 'in-outcome'), 0o6755);
    await writeFile(join(cwd, 'ready'), '');
    const outcome = await running;

    const stdout = await readFile(join(outcome.output, 'stdout.log'), 'utf8');
    // cp -p copies the bytes but cannot restore the bit.
    expect(stdout).toMatch(/^cp-p=[1-9]/m);
    const result = await resultOf(outcome);
    expect(result.classification).toBe('completed');
    expect([...(result.host_privilege_stripped ?? [])].sort()).toEqual(
      [join(cwd, 'deep', 'er', 'sgid'), join(cwd, 'planted'), join(outcomeDir, 'in-outcome')].sort(),
    );
    expect((await lstat(join(cwd, 'planted'))).mode & 0o7777).toBe(0o755);
    expect((await lstat(join(cwd, 'deep', 'er', 'sgid'))).mode & 0o7777).toBe(0o711);
    expect((await lstat(join(outcomeDir, 'in-outcome'))).mode & 0o7777).toBe(0o755);
    // Busybox cp creates the copy with the source's mode: refused, so no copy at all.
    expect(((await lstat(join(cwd, 'copied')).catch(() => null))?.mode ?? 0) & 0o6000).toBe(0);
    if (hasCc) expect(await asNobody(join(cwd, 'planted'), 'euid')).toBe('euid=65534 setuid0=-1 uid=65534');
  });

  it('ordinary work still runs under the profile: shell, cp, tar, mkdir, chmod, links, pipes, background jobs', async () => {
    const script = [
      'set -e',
      'mkdir -p a/b/c; echo hello > a/b/c/f; cp -r a copy; cp -p a/b/c/f kept; mv copy moved',
      'chmod 0750 kept; chmod -R go-w moved; ln -s kept link; ln kept hard; mkfifo pipe; rm pipe',
      'tar -cf t.tar a; mkdir x; tar -xpf t.tar -C x; cat x/a/b/c/f',
      'sleep 0.2 & wait $!; echo piped | tr a-z A-Z; find . -name f | sort | wc -l',
      'ls -l kept | cut -c1-10; date +%Y >/dev/null; id -u; touch -d 2020-01-01 moved/b/c/f',
      WRITE_OWN,
    ].join('\n');
    const outcome = await pairRun('ordinary-work', script);
    const stdout = await readFile(join(outcome.output, 'stdout.log'), 'utf8');
    expect(stdout).toBe('hello\nPIPED\n3\n-rwxr-x---\n0\n');
    const result = await resultOf(outcome);
    expect(result.classification).toBe('completed');
    expect(result.container.exit_code).toBe(0);
  });

  it('a session (serve) gets the same profile: chmod 4755 in its rw host mount is refused, uid 65534 stays 65534', async () => {
    const dir = join(work, 'session-mount');
    await mkdir(dir, { mode: 0o755 });
    const server = await startTestServer({ clientMode: 'raw' });
    try {
      const created = await server.client.call<{ session_id: string; container_id: string }>(
        'POST',
        '/v1/sessions',
        {
          body: { image: DRIVER_IMAGE, mounts: [{ source: dir, target: '/m' }] },
        },
      );
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      const inspected = await rt.docker.getContainer(created.body.container_id).inspect();
      // Docker takes the JSON itself, Podman a file's path (src/adapters/docker/seccomp-option.ts).
      const seccomp = await rt.seccomp.option();
      expect(seccomp).toMatch(engineIsPodman ? /^seccomp=\/.+\.json$/ : /^seccomp=\{/);
      if (!engineIsPodman) expect(seccomp).toBe(SECCOMP_SECURITY_OPT);
      expect(inspected.HostConfig.SecurityOpt).toEqual(['no-new-privileges', seccomp]);
      const out = await server.client.call<{ stdout: string; return_code: number }>(
        'POST',
        `/v1/sessions/${created.body.session_id}/exec`,
        {
          body: {
            command:
              'cp /bin/busybox /m/busybox; chmod 4755 /m/busybox; echo "chmod=$?"; chmod g+s /m/busybox; echo "g+s=$?"',
          },
        },
      );
      expect(out.body.stdout).toMatch(/^chmod=[1-9]\ng\+s=[1-9]\n$/);
      const deleted = await server.client.call('DELETE', `/v1/sessions/${created.body.session_id}`);
      expect(deleted.status).toBe(200);
    } finally {
      await server.dispose();
    }
    expect((await lstat(join(dir, 'busybox'))).mode & 0o7777).toBe(0o755);
    expect(await asNobody(join(dir, 'busybox'), 'id', '-u')).toBe('65534');
  });
});
