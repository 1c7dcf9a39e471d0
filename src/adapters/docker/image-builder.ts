import { createHash } from 'node:crypto';
import { copyFile, cp, mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Docker from 'dockerode';
import * as tarFs from 'tar-fs';
import { RoboguideError } from '../../core/errors.js';
import { toEngineError } from './engine-error.js';

import { syntheticImageTag, type BuildReport } from '../../core/synthetic-images.js';

const CONTEXT_LABEL = 'roboguide.context-sha256';

async function hashContext(dir: string, busyboxPath: string): Promise<string> {
  const hash = createHash('sha256');
  for (const name of (await readdir(dir)).sort()) {
    hash
      .update(name)
      .update('\0')
      .update(await readFile(join(dir, name)))
      .update('\0');
  }
  hash.update(await readFile(busyboxPath));
  return hash.digest('hex');
}

interface ProgressEvent {
  error?: string;
  errorDetail?: { message?: string };
  stream?: string;
}

/** Build errors do not reject dockerode's promise: scan the progress stream for `error`/`errorDetail`. */
async function followBuild(docker: Docker, stream: NodeJS.ReadableStream): Promise<string[]> {
  const events = await new Promise<ProgressEvent[]>((resolve, reject) => {
    docker.modem.followProgress(stream, (err: Error | null, output: ProgressEvent[]) =>
      err ? reject(err) : resolve(output),
    );
  });
  const failure = events.find((e) => e.error !== undefined || e.errorDetail !== undefined);
  if (failure) {
    throw new RoboguideError(
      'E_IMAGE_BUILD',
      `image build failed: ${failure.errorDetail?.message ?? failure.error ?? 'unknown error'}`,
    );
  }
  return events.flatMap((e) => (e.stream ? [e.stream] : []));
}

async function assertStaticBusybox(busyboxPath: string): Promise<void> {
  try {
    await stat(busyboxPath);
  } catch {
    throw new RoboguideError('E_IMAGE_BUILD', `static busybox not found at ${busyboxPath}`, {
      suggestions: ['apt-get install -y busybox-static', 'or pass --busybox PATH'],
    });
  }
}

/**
 * Build every image under `dockerDir` (one folder each, with a Dockerfile) from a tar-fs packed context that
 * adds the host's static busybox. No pulls: the Dockerfiles start FROM scratch. Skips an image whose recorded
 * context digest matches.
 */
export async function buildSyntheticImages(
  docker: Docker,
  options: {
    readonly dockerDir: string;
    readonly busyboxPath: string;
    readonly only?: readonly string[];
    readonly force?: boolean;
  },
): Promise<BuildReport[]> {
  await assertStaticBusybox(options.busyboxPath);
  const names = (await readdir(options.dockerDir, { withFileTypes: true }))
    .filter((d) => d.isDirectory())
    .map((d) => d.name)
    .filter((n) => !options.only || options.only.includes(n))
    .sort();
  const reports: BuildReport[] = [];
  for (const name of names) {
    const source = join(options.dockerDir, name);
    const tag = syntheticImageTag(name);
    const digest = await hashContext(source, options.busyboxPath);
    if (!options.force && (await currentDigest(docker, tag)) === digest) {
      reports.push({ name, tag, action: 'up_to_date', contextSha256: digest });
      continue;
    }
    const context = await mkdtemp(join(tmpdir(), `roboguide-build-${name}-`));
    try {
      await cp(source, context, { recursive: true });
      await copyFile(options.busyboxPath, join(context, 'busybox'));
      let stream: NodeJS.ReadableStream;
      try {
        const pack = tarFs.pack(context) as unknown as NodeJS.ReadableStream;
        stream = await docker.buildImage(pack, {
          t: tag,
          labels: { [CONTEXT_LABEL]: digest },
          rm: true,
          forcerm: true,
        });
      } catch (err) {
        throw toEngineError(err, `build image ${tag}`);
      }
      await followBuild(docker, stream);
      reports.push({ name, tag, action: 'built', contextSha256: digest });
    } finally {
      await rm(context, { recursive: true, force: true });
    }
  }
  return reports;
}

async function currentDigest(docker: Docker, tag: string): Promise<string | null> {
  try {
    const image = await docker.getImage(tag).inspect();
    return image.Config?.Labels?.[CONTEXT_LABEL] ?? null;
  } catch {
    return null;
  }
}
