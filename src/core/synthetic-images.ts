/** Synthetic images built from `docker/<name>/`; tag is `roboguide/<name>:1`. */
export const SYNTHETIC_IMAGE_TAG_VERSION = '1';
export function syntheticImageTag(name: string): string {
  return `roboguide/${name}:${SYNTHETIC_IMAGE_TAG_VERSION}`;
}
export const PAIR_DRIVER_IMAGE = syntheticImageTag('pair-driver');

/** One of the images `images build` builds from this checkout's docker/ (`roboguide/<name>:1`). */
export function isSyntheticImage(image: string): boolean {
  return /^roboguide\/[a-z0-9-]+:1$/.test(image);
}

/** What `images build` did for one synthetic image: built it, or found it up to date (same context digest). */
export interface BuildReport {
  readonly name: string;
  readonly tag: string;
  readonly action: 'built' | 'up_to_date';
  readonly contextSha256: string;
}
