import { fileURLToPath } from 'node:url';
import { DockerContainerRuntime } from './adapters/docker/docker-container-runtime.js';

/** The one place adapters are constructed. Commands ask for what they need here. */

/** Root of the installed package (the folder holding package.json, docker/, dist/). */
export const PACKAGE_ROOT = fileURLToPath(new URL('..', import.meta.url));
export const DOCKER_DIR = fileURLToPath(new URL('../docker', import.meta.url));

export function createContainerRuntime(): DockerContainerRuntime {
  // DOCKER_HOST / DOCKER_CERT_PATH are honoured by dockerode; default is the local socket.
  return new DockerContainerRuntime();
}
