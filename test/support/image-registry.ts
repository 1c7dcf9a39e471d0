/**
 * A throwaway image registry for tests (issue 43): Debian's `docker-registry` (2.8) serving on loopback with a config
 * of its own (filesystem storage in a temporary folder; with `auth`, basic auth from an htpasswd file made with
 * `htpasswd -B`). The engine pulls from `127.0.0.1:PORT/NAME` without TLS (loopback is an insecure registry by
 * default). Test images are built by the engine `FROM roboguide/pair-driver:1` (the shared base layers) plus a layer
 * of random bytes, pushed, then removed from the engine. Missing binaries skip the suite, unless
 * REQUIRE_IMAGE_REGISTRY=1 (CI), where they fail it.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DRIVER_IMAGE } from './docker.js';

const REGISTRY_BIN = '/usr/bin/docker-registry';
const HTPASSWD_BIN = '/usr/bin/htpasswd';

/** Why the registry cannot run here (null: it can). */
export function imageRegistryUnavailable(): string | null {
  if (!existsSync(REGISTRY_BIN)) return `${REGISTRY_BIN} is missing (apt-get install docker-registry)`;
  if (!existsSync(HTPASSWD_BIN)) return `${HTPASSWD_BIN} is missing (apt-get install apache2-utils)`;
  return null;
}

/** Skip (or, with REQUIRE_IMAGE_REGISTRY=1, fail) when the registry cannot run. */
export function requireImageRegistry(): boolean {
  const reason = imageRegistryUnavailable();
  if (reason !== null && process.env['REQUIRE_IMAGE_REGISTRY'] === '1')
    throw new Error(`REQUIRE_IMAGE_REGISTRY=1 but the image registry cannot run: ${reason}`);
  return reason === null;
}

export interface TestImageRegistry {
  /** `127.0.0.1:PORT`. */
  readonly host: string;
  readonly dir: string;
  /** SIGKILL the server (an outage: pulls are refused at once). */
  kill(): void;
  /** Start it again on the same storage and port (with or without auth). */
  start(auth?: { user: string; password: string }): Promise<void>;
  stop(): void;
}

/**
 * `where`: serve inside a network namespace of the tests' own on one of its addresses (a swarm node's veth address,
 * which every node reaches), not on the host's loopback; readiness is then probed from inside that namespace.
 */
export async function startImageRegistry(
  port: number,
  auth?: { user: string; password: string },
  where?: { readonly netns: string; readonly address: string },
): Promise<TestImageRegistry> {
  const dir = mkdtempSync(join(tmpdir(), 'rg43-registry-'));
  mkdirSync(join(dir, 'data'));
  let child: ChildProcess | null = null;
  const host = `${where?.address ?? '127.0.0.1'}:${port}`;
  const answers = async (): Promise<boolean> => {
    if (where === undefined)
      return fetch(`http://${host}/v2/`).then(
        (r) => r.status === 200 || r.status === 401,
        () => false,
      );
    const probe = spawnSync(
      'nsenter',
      [
        `--net=/run/netns/${where.netns}`,
        'curl',
        '-s',
        '-o',
        '/dev/null',
        '-w',
        '%{http_code}',
        `http://${host}/v2/`,
      ],
      { encoding: 'utf8' },
    );
    return probe.stdout === '200' || probe.stdout === '401';
  };
  const launch = async (withAuth?: { user: string; password: string }): Promise<void> => {
    const config = [
      'version: 0.1',
      'log:',
      '  level: warn',
      'storage:',
      '  filesystem:',
      `    rootdirectory: ${join(dir, 'data')}`,
      '  delete:',
      '    enabled: true',
      'http:',
      `  addr: ${host}`,
    ];
    if (withAuth !== undefined) {
      // bcrypt, as the registry requires; the password goes to htpasswd on stdin, never on a command line
      execFileSync(HTPASSWD_BIN, ['-B', '-i', '-c', join(dir, 'htpasswd'), withAuth.user], {
        input: withAuth.password,
        stdio: ['pipe', 'ignore', 'ignore'],
      });
      config.push('auth:', '  htpasswd:', '    realm: rg43', `    path: ${join(dir, 'htpasswd')}`);
    }
    writeFileSync(join(dir, 'config.yml'), `${config.join('\n')}\n`);
    const log = openSync(join(dir, 'registry.log'), 'a');
    const argv = ['serve', join(dir, 'config.yml')];
    child =
      where === undefined
        ? spawn(REGISTRY_BIN, argv, { stdio: ['ignore', log, log] })
        : spawn('nsenter', [`--net=/run/netns/${where.netns}`, REGISTRY_BIN, ...argv], {
            stdio: ['ignore', log, log],
          });
    const deadline = Date.now() + 15_000;
    for (;;) {
      if (await answers()) return;
      if (Date.now() > deadline) throw new Error(`docker-registry did not answer on ${host}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  await launch(auth);
  const kill = (): void => {
    const c: ChildProcess | null = child;
    if (c?.pid !== undefined && c.exitCode === null) {
      c.kill('SIGKILL');
      spawnSync('sleep', ['0.2']);
    }
    child = null;
  };
  return {
    host,
    dir,
    kill,
    start: launch,
    stop: () => {
      kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface TestImage {
  /** `127.0.0.1:PORT/NAME:1` as jobs name it. */
  readonly ref: string;
  readonly randomBytes: number;
}

/**
 * `count` images `HOST/PREFIX-i:1`: the pair driver's layers (shared by all), then `groups` shared middle layers
 * (each image gets the one of its group), then its own random layer of `sizeMb(i)` MiB. Built, pushed, removed from
 * the engine (the build cache is pruned by the caller's cleanup).
 */
export function pushTestImages(
  registry: TestImageRegistry,
  prefix: string,
  count: number,
  sizeMb: (i: number) => number,
  groups = 2,
): TestImage[] {
  const ctx = mkdtempSync(join(tmpdir(), 'rg43-images-'));
  const images: TestImage[] = [];
  try {
    for (let g = 0; g < groups; g += 1)
      execFileSync('head', ['-c', String(4 * 1024 * 1024), '/dev/urandom'], {
        stdio: ['ignore', openSync(join(ctx, `group${g}.bin`), 'w'), 'ignore'],
      });
    for (let i = 0; i < count; i += 1) {
      const mb = sizeMb(i);
      execFileSync('head', ['-c', String(mb * 1024 * 1024), '/dev/urandom'], {
        stdio: ['ignore', openSync(join(ctx, 'own.bin'), 'w'), 'ignore'],
      });
      writeFileSync(
        join(ctx, 'Dockerfile'),
        `FROM ${DRIVER_IMAGE}\nCOPY group${i % groups}.bin /opt/group.bin\nCOPY own.bin /opt/own.bin\n`,
      );
      const ref = `${registry.host}/${prefix}-${i}:1`;
      execFileSync('docker', ['build', '-q', '-t', ref, ctx], { stdio: 'ignore' });
      execFileSync('docker', ['push', ref], { stdio: 'ignore' });
      execFileSync('docker', ['rmi', ref], { stdio: 'ignore' });
      images.push({ ref, randomBytes: mb * 1024 * 1024 });
    }
  } finally {
    rmSync(ctx, { recursive: true, force: true });
  }
  return images;
}

/** Every image of the engine whose repository starts with `HOST/PREFIX` (any tag or digest), with its size. */
export function enginePrefixImages(host: string, prefix: string): { id: string; bytes: number }[] {
  const out = spawnSync(
    'docker',
    [
      'images',
      '--digests',
      '--no-trunc',
      '--format',
      '{{.Repository}}\t{{.ID}}',
      '--filter',
      `reference=${host}/${prefix}-*`,
    ],
    { encoding: 'utf8' },
  );
  const ids = [
    ...new Set(
      out.stdout
        .split('\n')
        .filter(Boolean)
        .map((l) => l.split('\t')[1] ?? ''),
    ),
  ].filter(Boolean);
  return ids.map((id) => {
    const size = spawnSync('docker', ['image', 'inspect', '--format', '{{.Size}}', id], { encoding: 'utf8' });
    return { id, bytes: Number(size.stdout.trim()) || 0 };
  });
}

/** Remove every image of the prefix from the engine (what the tests pulled). */
export function removePrefixImages(host: string, prefix: string): void {
  for (const { id } of enginePrefixImages(host, prefix))
    spawnSync('docker', ['rmi', '-f', id], { stdio: 'ignore' });
}

/** Point `ref` at another image in its registry (a new build pushed under the same tag), leaving the engine clean. */
export function moveTag(ref: string): void {
  const ctx = mkdtempSync(join(tmpdir(), 'rg43-move-'));
  try {
    writeFileSync(join(ctx, 'moved.txt'), `${Date.now()} ${Math.random()}\n`);
    writeFileSync(join(ctx, 'Dockerfile'), `FROM ${DRIVER_IMAGE}\nCOPY moved.txt /opt/moved.txt\n`);
    execFileSync('docker', ['build', '-q', '-t', ref, ctx], { stdio: 'ignore' });
    execFileSync('docker', ['push', ref], { stdio: 'ignore' });
    execFileSync('docker', ['rmi', ref], { stdio: 'ignore' });
  } finally {
    rmSync(ctx, { recursive: true, force: true });
  }
}
