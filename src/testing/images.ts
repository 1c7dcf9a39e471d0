import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type Docker from 'dockerode';
import { Dockerode } from '../adapters/docker/dockerode.js';
import { buildSyntheticImages } from '../adapters/docker/image-builder.js';
import { PAIR_DRIVER_IMAGE } from '../core/synthetic-images.js';

/** The package's root (where bin/, dist/ and docker/ are), in this checkout or in a consumer's node_modules. */
export const PACKAGE_ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Build the synthetic pair-driver image (FROM scratch + the host's static busybox; no network, no pull). */
export async function buildPairDriverImage(
  options: { docker?: Docker; busyboxPath?: string } = {},
): Promise<string> {
  await buildSyntheticImages(options.docker ?? new Dockerode(), {
    dockerDir: join(PACKAGE_ROOT, 'docker'),
    busyboxPath: options.busyboxPath ?? '/bin/busybox',
    only: ['pair-driver'],
  });
  return PAIR_DRIVER_IMAGE;
}
