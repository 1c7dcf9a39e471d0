import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DockerContainerRuntime } from '../../src/adapters/docker/docker-container-runtime.js';
import { layerHoldsAbove, type GraphDriverFacts } from '../../src/adapters/docker/upper-layer.js';
import { runPair } from '../../src/app/pair/run-pair.js';
import { untouchedByContainer } from '../../src/core/sessions-skip.js';
import { DRIVER_IMAGE, expectNoContainersLeft, noDocker, pairRunDeps } from '../support/docker.js';

/** The real engine; it only counts the sessions copies it is asked for. */
/** A plain container's limits, given as a pair's are: the Podman set's engine cannot set its own defaults here. */
const PLAIN_LIMITS = ['--ulimit', 'nofile=16384:16384', '--ulimit', 'nproc=4096:4096'];

class CountingRuntime extends DockerContainerRuntime {
  archives = 0;
  override getArchive(id: string, path: string): Promise<Readable | null> {
    this.archives++;
    return super.getArchive(id, path);
  }
}

const rt = new CountingRuntime();
// One set of adapters for the whole file, as in a batch supervisor: what the first pair learned about the image
// holds for the next ones.
const deps = pairRunDeps(rt);
const jobsUsed: string[] = [];
let work: string;

async function pair(argv: string[], extra: Record<string, unknown> = {}) {
  const job = `it-skip-${randomUUID().slice(0, 6)}`;
  jobsUsed.push(job);
  const cwd = join(work, job, 'cwd');
  await mkdir(cwd, { recursive: true });
  const spec = {
    job_id: job,
    argv,
    cwd,
    outcome_path: join(work, job, 'out', 'outcome.json'),
    timeout_seconds: 60,
    image: DRIVER_IMAGE,
    ...extra,
  };
  const before = rt.archives;
  const { result, output } = await runPair(deps, {
    specText: JSON.stringify(spec),
    specSource: `${job}.json`,
    output: join(work, job, 'evidence'),
    bindAddress: '127.0.0.1',
    environment: {},
    codeVersion: 'test',
    cwd: work,
  });
  expect(result.cleanup).toMatchObject({ removed: true, verified_absent: true });
  expect(await rt.inspect(result.container.id!)).toBeNull();
  // No sessions folder at all when the container had no sessions dir (as before the skip existed).
  const entries = await readdir(join(output, 'sessions'), { recursive: true, withFileTypes: true }).catch(
    () => null,
  );
  const sessionFiles = (entries ?? []).filter((e) => e.isFile());
  return { result, output, copied: rt.archives - before, sessionFiles, cwd };
}

describe.skipIf(noDocker)(
  'the sessions copy is skipped only when nothing could have been written there',
  () => {
    beforeAll(async () => {
      work = await mkdtemp(join(tmpdir(), 'rg-skip-'));
    });
    afterEach(() => expectNoContainersLeft(jobsUsed));
    afterAll(async () => {
      await rm(work, { recursive: true, force: true });
    });

    it('copies the first pair of an image, skips the next untouched one, and both keep an empty sessions folder', async () => {
      const first = await pair(['/opt/driver/run', 'outcome=completed']);
      expect(first.copied).toBe(1);
      expect(first.sessionFiles).toEqual([]);
      const second = await pair(['/opt/driver/run', 'outcome=completed']);
      expect(second.copied).toBe(0);
      expect(second.sessionFiles).toEqual([]);
      expect(second.result.sessions).toEqual({ files: 0, bytes: 0, refusals: [] });
      expect(second.result.classification).toBe('completed');
    });

    it('still collects (and diagnoses) a session written after the outcome, just before the driver exits', async () => {
      await pair(['/opt/driver/run', 'outcome=completed']); // the image is known to hold an empty dir
      const late = await pair(['/opt/driver/run', 'outcome=completed', 'sleep=0.3', 'session=429']);
      expect(late.copied).toBe(1);
      expect(late.sessionFiles).toHaveLength(1);
      expect(late.result.sessions).toMatchObject({ files: 1, refusals: [] });
      const onDisk = JSON.parse(await readFile(join(late.output, 'result.json'), 'utf8'));
      expect(onDisk.provider_failure).toMatchObject({ http_status: 429 });
    });

    it('copies a sessions dir the driver removed (nothing there: no files), and one reached through a bind mount', async () => {
      const removed = await pair([
        '/bin/sh',
        '-c',
        'rm -rf /root/.codex && exec /opt/driver/run outcome=completed',
      ]);
      expect(removed.copied).toBe(1);
      expect(removed.result.sessions).toEqual({ files: 0, bytes: 0, refusals: [] });
      expect(removed.sessionFiles).toEqual([]);
      // sessions_dir inside the bind-mounted cwd: writes there never show in the container's layer changes.
      const job = `it-skip-mount-${randomUUID().slice(0, 6)}`;
      const cwd = join(work, job, 'cwd');
      const viaMount = await pair(
        ['/bin/sh', '-c', `SESSIONS_DIR=${cwd}/codex exec /opt/driver/run session=success outcome=completed`],
        {
          job_id: job,
          cwd,
          outcome_path: join(work, job, 'out', 'outcome.json'),
          sessions_dir: `${cwd}/codex`,
        },
      );
      expect(viaMount.copied).toBe(1);
      expect(viaMount.sessionFiles).toHaveLength(1);
    });

    it('a sessions_dir with `..` is always copied: a session written there is collected although the image is known (the hostile review)', async () => {
      await pair(['/opt/driver/run', 'outcome=completed']); // the image is known to hold an empty dir
      const dotted = await pair(['/opt/driver/run', 'outcome=completed', 'session=429'], {
        sessions_dir: '/opt/../root/.codex/sessions',
      });
      expect(dotted.copied).toBe(1);
      expect(dotted.result.sessions).toMatchObject({ files: 1, refusals: [] });
      const onDisk = JSON.parse(await readFile(join(dotted.output, 'result.json'), 'utf8'));
      expect(onDisk.provider_failure).toMatchObject({ http_status: 429 });
    });

    it('an image whose sessions dir lies under a link is never learned: a session written through the link is collected', async () => {
      // /root/.codex is a link to /data/codex: a write through it shows in the changes as /data/codex/…, so the
      // sessions dir looks untouched. Learning the image's empty dir from the first pair would skip the second's copy.
      const linked = 'roboguide/test-linked-sessions:1';
      execFileSync('docker', ['build', '-q', '-t', linked, '-'], {
        input: `FROM ${DRIVER_IMAGE}\nRUN mkdir -p /data/codex/sessions && rm -rf /root/.codex && ln -s /data/codex /root/.codex\n`,
        stdio: ['pipe', 'ignore', 'pipe'],
      });
      const probe = execFileSync('docker', ['create', '--network', 'none', linked, 'true'], {
        encoding: 'utf8',
      }).trim();
      const plain = execFileSync('docker', ['create', '--network', 'none', DRIVER_IMAGE, 'true'], {
        encoding: 'utf8',
      }).trim();
      try {
        expect(await rt.linkFreePath(probe, '/root/.codex/sessions')).toBe(false);
        expect(await rt.linkFreePath(plain, '/root/.codex/sessions')).toBe(true);
        expect(await rt.linkFreePath(plain, '/no/such/dir')).toBe(true); // nothing there can be a link
        expect(await rt.linkFreePath(plain, '/bin/sh')).toBe(false); // a link itself
      } finally {
        execFileSync('docker', ['rm', '-f', probe, plain], { stdio: 'ignore' });
      }
      expect(await rt.linkFreePath(plain, '/root')).toBe(false); // the container is gone
      const first = await pair(['/opt/driver/run', 'outcome=completed'], { image: linked });
      expect(first.copied).toBe(1);
      const second = await pair(['/opt/driver/run', 'outcome=completed', 'session=429'], { image: linked });
      expect(second.copied).toBe(1);
      expect(second.sessionFiles).toHaveLength(1);
      expect(second.result.sessions).toMatchObject({ files: 1, refusals: [] });
    });

    it('what one process learned about the image, a new one knows: its first untouched pair is skipped too', async () => {
      const cacheFile = join(process.env['XDG_CACHE_HOME']!, 'roboguide-eval', 'image-sessions.json');
      await rm(cacheFile, { force: true }); // nothing known: as on a new machine
      const runOnce = async (fresh: CountingRuntime) => {
        const id = `it-skip-new-${randomUUID().slice(0, 6)}`;
        jobsUsed.push(id);
        const cwd = join(work, id, 'cwd');
        await mkdir(cwd, { recursive: true });
        const { result } = await runPair(pairRunDeps(fresh), {
          specText: JSON.stringify({
            job_id: id,
            argv: ['/opt/driver/run', 'outcome=completed'],
            cwd,
            outcome_path: join(work, id, 'out', 'outcome.json'),
            timeout_seconds: 60,
            image: DRIVER_IMAGE,
          }),
          specSource: `${id}.json`,
          output: join(work, id, 'evidence'),
          bindAddress: '127.0.0.1',
          environment: {},
          codeVersion: 'test',
          cwd: work,
        });
        expect(result.sessions).toEqual({ files: 0, bytes: 0, refusals: [] });
        return fresh.archives;
      };
      // Two sets of adapters, each with its own memo (as two `pair run` processes): only the cache file is shared.
      expect(await runOnce(new CountingRuntime())).toBe(1);
      const learned = JSON.parse(await readFile(cacheFile, 'utf8')) as { images: { content: string }[] };
      expect(learned.images).toEqual([
        expect.objectContaining({ dir: '/root/.codex/sessions', content: 'empty' }), // the image has the folder, empty,
      ]);
      expect(await runOnce(new CountingRuntime())).toBe(0);
    });

    it("the layer read on this host (one lstat in the overlay's upper folder) says what the engine's changes list says, for every kind of change", async () => {
      const scenarios = [
        'true',
        ': > /tmp/x',
        'mkdir -p /root/.codex/sessions && : > /root/.codex/sessions/s.json',
        ': > /root/.bash_history',
        'rm -rf /root/.codex',
        'mkdir -p /data/codex && : > /data/codex/x',
        'mv /root /root2',
        'chmod 700 /root',
        'ln -s /tmp /sessions',
        'mkdir -p /tmp/many && cd /tmp/many && for i in $(seq 1 300); do : > "file-$i"; done',
      ];
      const dirs = ['/root/.codex/sessions', '/sessions', '/tmp/s', '/data/codex/sessions'];
      // The engine's list asked for (GET …/changes), counted: a layer read here asks none.
      const listed: string[] = [];
      const modem = rt.docker.modem as { dial: (options: { path: string }, ...rest: unknown[]) => unknown };
      const dial = modem.dial.bind(modem);
      modem.dial = (options, ...rest) => {
        if (options.path.endsWith('/changes')) listed.push(options.path);
        return dial(options, ...rest);
      };
      for (const script of scenarios) {
        const id = execFileSync(
          'docker',
          ['run', '-d', '--network', 'none', ...PLAIN_LIMITS, DRIVER_IMAGE, '/bin/sh', '-c', script],
          {
            encoding: 'utf8',
          },
        ).trim();
        try {
          execFileSync('docker', ['wait', id], { stdio: 'ignore' });
          const engine = await rt.filesystemChanges(id); // the engine's whole list
          expect(engine, script).not.toBeNull();
          const inspect = (await rt.docker.getContainer(id).inspect()) as { GraphDriver?: GraphDriverFacts };
          for (const dir of dirs) {
            // Read on this host (the fast path is the one taken here), and the same verdict as the engine's list.
            expect(layerHoldsAbove(inspect.GraphDriver, dir), `${script} ${dir}`).not.toBeNull();
            const asked = listed.length;
            const read = await rt.filesystemChanges(id, dir);
            expect(listed.length, `${script} ${dir}: no list asked`).toBe(asked);
            expect(untouchedByContainer(read!, dir), `${script} ${dir}`).toBe(
              untouchedByContainer(engine!, dir),
            );
            expect(read!.imageId).toBe(engine!.imageId);
          }
        } finally {
          execFileSync('docker', ['rm', '-f', id], { stdio: 'ignore' });
        }
      }
      modem.dial = dial;
      // The engine's whole list was asked once per scenario (the comparison), never for a layer read here.
      expect(listed).toHaveLength(scenarios.length);
    });

    it("the engine's changes list, where it is read, is bounded: one too long to read is an error (the dir then copied), and a layer read here costs one lstat whatever the pair wrote", async () => {
      const small = new CountingRuntime(undefined, { changesMaxBytes: 1_000 });
      const many = execFileSync(
        'docker',
        [
          'run',
          '-d',
          '--network',
          'none',
          ...PLAIN_LIMITS,
          DRIVER_IMAGE,
          '/bin/sh',
          '-c',
          'mkdir -p /tmp/many && cd /tmp/many && for i in $(seq 1 200); do : > "file-$i"; done',
        ],
        { encoding: 'utf8' },
      ).trim();
      try {
        execFileSync('docker', ['wait', many], { stdio: 'ignore' });
        await expect(small.filesystemChanges(many)).rejects.toThrow(/over 1000 bytes/);
        const read = await small.filesystemChanges(many, '/root/.codex/sessions');
        expect(read?.changed).toEqual([]);
      } finally {
        execFileSync('docker', ['rm', '-f', many], { stdio: 'ignore' });
      }
    });

    it('a layer whose changes list is too long to read is copied as usual (a hostile pair cannot make the check costly)', async () => {
      // Over 1000 bytes of changes is "too long" for this runtime: the check gives up and the dir is copied out.
      const small = new CountingRuntime(undefined, { changesMaxBytes: 1_000 });
      const smallDeps = pairRunDeps(small);
      // Whether this host reads a container's layer itself (a local overlay engine, as root): then no list is read.
      const probe = execFileSync('docker', ['create', '--network', 'none', DRIVER_IMAGE, 'true'], {
        encoding: 'utf8',
      }).trim();
      const hostReadsLayers =
        layerHoldsAbove(
          ((await small.docker.getContainer(probe).inspect()) as { GraphDriver?: GraphDriverFacts })
            .GraphDriver,
          '/root',
        ) !== null;
      execFileSync('docker', ['rm', '-f', probe], { stdio: 'ignore' });
      const job = (n: number) => `it-skip-big-${n}-${randomUUID().slice(0, 6)}`;
      const noop = ['/opt/driver/run', 'outcome=completed'];
      await pair(noop); // the image's empty dir is known (this file's cache folder keeps it for new adapters too)
      for (const [i, argv] of [
        noop,
        noop,
        [
          '/bin/sh',
          '-c',
          'mkdir -p /tmp/many && cd /tmp/many && for i in $(seq 1 200); do : > "file-$i"; done && exec /opt/driver/run outcome=completed',
        ],
      ].entries()) {
        const id = job(i);
        jobsUsed.push(id);
        const cwd = join(work, id, 'cwd');
        await mkdir(cwd, { recursive: true });
        const spec = {
          job_id: id,
          argv,
          cwd,
          outcome_path: join(work, id, 'out', 'outcome.json'),
          timeout_seconds: 60,
          image: DRIVER_IMAGE,
        };
        const before = small.archives;
        const { result } = await runPair(smallDeps, {
          specText: JSON.stringify(spec),
          specSource: `${id}.json`,
          output: join(work, id, 'evidence'),
          bindAddress: '127.0.0.1',
          environment: {},
          codeVersion: 'test',
          cwd: work,
        });
        expect(result.classification).toBe('completed');
        expect(result.cleanup).toMatchObject({ removed: true, verified_absent: true });
        // The first two (short lists) are skipped. The third's list is too long to read: where the engine's list
        // is read it is copied although its image is known; on this host its layer is read instead (one lstat: the
        // writes in /tmp are nowhere near the sessions dir) and it is skipped too.
        expect(small.archives - before).toBe(i === 2 && !hostReadsLayers ? 1 : 0);
      }
    });
  },
);
