import { ExitCode, RoboguideError } from '../core/errors.js';
import { isSyntheticImage } from '../core/synthetic-images.js';

/** E_IMAGE_MISSING (exit 2): which image, which jobs need it, and how to get it onto this engine. */
export function imagesMissing(
  missing: readonly string[],
  jobsOf: ReadonlyMap<string, readonly string[]>,
  bin: string,
  /** Per image: why its registry could not resolve it (the batch's image plan, issue 43), masked. */
  unresolved?: ReadonlyMap<string, string>,
): RoboguideError {
  const lines = missing.map((image) => {
    const jobs = jobsOf.get(image) ?? [];
    const shown =
      jobs.length > 5 ? `${jobs.slice(0, 5).join(', ')} and ${jobs.length - 5} more` : jobs.join(', ');
    const why = unresolved?.get(image);
    const pulled = why !== undefined ? ` and its registry cannot resolve it: ${why}` : '';
    return `image ${image} is not present on this engine${pulled} (needed by ${jobs.length === 1 ? 'job' : `${jobs.length} jobs:`} ${shown})`;
  });
  return new RoboguideError('E_IMAGE_MISSING', lines.join('\n'), {
    exitCode: ExitCode.invalidInput,
    context: { images: missing },
    suggestions: [
      ...missing.map(
        (image) =>
          `get it onto this engine: \`docker build -t ${image} <folder with its Dockerfile>\`, \`docker pull ${image}\` or \`docker load -i <file>\``,
      ),
      ...(missing.some(isSyntheticImage)
        ? [`the synthetic images of this checkout: \`${bin} images build\``]
        : []),
      'see docs/driver.md: building your own evaluation image',
    ],
  });
}

/**
 * E_IMAGE_MISSING on a swarm (issue 43, exit 2): each image some node lacks, the nodes that lack it and those that
 * hold it, the jobs that need it and, when the batch tried to plan its pulls, why its registry could not resolve it.
 * Without a plan (no registry access) each node's engine must hold every image at start.
 */
export function imagesMissingOnNodes(
  lacking: ReadonlyMap<string, { readonly present: readonly string[]; readonly absent: readonly string[] }>,
  jobsOf: ReadonlyMap<string, readonly string[]>,
  /** Per image: its registry's answer (masked), when the nodes were to pull it. */
  unresolved?: ReadonlyMap<string, string>,
): RoboguideError {
  const lines = [...lacking.entries()].map(([image, where]) => {
    const jobs = jobsOf.get(image) ?? [];
    const held = where.present.length > 0 ? `held by ${where.present.join(', ')}` : 'held by no node';
    const why = unresolved?.get(image);
    const registry = why !== undefined ? `; its registry cannot resolve it: ${why}` : '';
    return `image ${image} is not present on swarm node(s) ${where.absent.join(', ')} (${held}; needed by ${jobs.length} job(s))${registry}`;
  });
  return new RoboguideError('E_IMAGE_MISSING', lines.join('\n'), {
    exitCode: ExitCode.invalidInput,
    context: {
      images: [...lacking.keys()],
      nodes: Object.fromEntries(
        [...lacking.entries()].map(([i, w]) => [i, { present: w.present, absent: w.absent }]),
      ),
    },
    suggestions: [
      ...[...lacking.entries()].flatMap(([image, where]) =>
        where.absent.map(
          (node) => `on node ${node}: \`docker -H <${node}'s engine> pull ${image}\` (or docker load)`,
        ),
      ),
      'a swarm batch pulls an image a node lacks only when its registry resolves it at start (docs/images.md, Swarm)',
    ],
  });
}
