import { spawnSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TestProject } from 'vitest/node';
import { DockerContainerRuntime } from '../../src/adapters/docker/docker-container-runtime.js';
import { buildSyntheticImages } from '../../src/adapters/docker/image-builder.js';
import { PAIR_DRIVER_IMAGE } from '../../src/core/synthetic-images.js';
import { probeGpuView } from '../../src/app/gpu-probe.js';
import { systemClock } from '../../src/adapters/system-clock.js';

declare module 'vitest' {
  export interface ProvidedContext {
    dockerAvailable: boolean;
    dockerSkipReason: string;
    /** The shared engine can start containers with NVIDIA device requests (a GPU host). */
    engineHasNvidia: boolean;
    /** The engine behind DOCKER_HOST is Podman (the Podman set, scripts/podman-suite.sh): Docker-only tests skip. */
    engineIsPodman: boolean;
  }
}

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

function newestMtimeMs(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestMtimeMs(path) : statSync(path).mtimeMs);
  }
  return newest;
}

/** Several suites run the built CLI (bin/run.js loads dist/): rebuild when src/ is newer. */
function ensureFreshBuild(): void {
  let distMs = 0;
  try {
    distMs = newestMtimeMs(join(ROOT, 'dist'));
  } catch {
    // no dist yet
  }
  if (distMs >= newestMtimeMs(join(ROOT, 'src'))) return;
  const r = spawnSync('npm', ['run', '--silent', 'build'], { cwd: ROOT, encoding: 'utf8' });
  if (r.status !== 0)
    throw new Error(`npm run build failed before the integration suite:\n${r.stdout}${r.stderr}`);
}

/**
 * One short probe: does a container asking for `gpus: all` show a GPU here (the request kept in its inspect, and
 * nvidia-smi -L, /dev/nvidia<N> or NVIDIA_VISIBLE_DEVICES as asked inside it: src/app/gpu-probe.ts)? "It started"
 * is no proof: Podman drops the request and starts the container anyway. Always removed.
 */
async function probeNvidia(runtime: DockerContainerRuntime): Promise<boolean> {
  const { containerId, verdict } = await probeGpuView(
    { runtime, clock: systemClock },
    {
      name: `roboguide-setup-gpu-probe-${process.pid}`,
      image: PAIR_DRIVER_IMAGE,
      gpus: 'all',
      labels: { 'roboguide.test': 'gpu-probe' },
      timeoutMs: 30_000,
    },
  );
  if (containerId !== null) await runtime.remove(containerId);
  if (verdict.kind === 'not_shown') console.warn(`\n*** GPU probe: ${verdict.why} ***\n`);
  return verdict.kind === 'shown';
}

/**
 * Integration suite set-up: a fresh build, the engine, the synthetic images, and what the engine can do. Locally a
 * missing engine makes the integration tests skip visibly; with REQUIRE_DOCKER=1 (CI) it is a failure.
 */
export default async function setup(project: TestProject): Promise<void> {
  // Both integration lanes (vitest.config.ts) set up in this one process: the first does the work, the other takes
  // its facts (never two builds, image builds or GPU probes at once).
  const shared = globalThis as { roboguideSetup?: Promise<EngineFacts> };
  const facts = await (shared.roboguideSetup ??= engineFacts());
  project.provide('dockerAvailable', facts.available);
  project.provide('dockerSkipReason', facts.reason);
  project.provide('engineHasNvidia', facts.nvidia);
  project.provide('engineIsPodman', facts.podman);
}

interface EngineFacts {
  readonly available: boolean;
  readonly reason: string;
  readonly nvidia: boolean;
  readonly podman: boolean;
}

async function engineFacts(): Promise<EngineFacts> {
  ensureFreshBuild();
  const runtime = new DockerContainerRuntime();
  let available = false;
  let reason = '';
  let podman = false;
  try {
    podman = (await runtime.info()).product === 'podman';
    available = true;
  } catch (err) {
    reason = `no Docker engine answers (${(err as Error).message})`;
  }
  const engineRequired = process.env['REQUIRE_DOCKER'] === '1';
  if (!available && engineRequired) throw new Error(`REQUIRE_DOCKER=1 but ${reason}`);
  let nvidia = false;
  if (available) {
    await buildSyntheticImages(runtime.docker, {
      dockerDir: join(ROOT, 'docker'),
      busyboxPath: '/bin/busybox',
    });
    nvidia = await probeNvidia(runtime);
    if (nvidia)
      console.warn(
        '\n*** this engine starts NVIDIA device requests: the "no NVIDIA runtime" tests are SKIPPED ***\n',
      );
  } else {
    console.warn(`\n*** integration tests SKIPPED: ${reason} ***\n`);
  }
  if (podman)
    console.warn(
      '\n*** the engine is Podman: tests of Docker-only behaviour are SKIPPED (docs/podman.md) ***\n',
    );
  return { available, reason, nvidia, podman };
}
