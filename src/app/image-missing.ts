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
