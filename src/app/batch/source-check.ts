import { createHash } from 'node:crypto';
import type { FileSystem } from '../ports/file-system.js';

export interface SourceCheck {
  readonly ok: boolean;
  readonly checked: number;
  /** Paths whose digest differs or that cannot be read (never their contents). */
  readonly mismatched: readonly string[];
}

async function sha256Of(fs: FileSystem, path: string): Promise<string | null> {
  try {
    const hash = createHash('sha256');
    for await (const chunk of fs.streamUserFile(path)) hash.update(chunk);
    return hash.digest('hex');
  } catch {
    return null;
  }
}

/** Compare the pinned public source files with their SHA-256 now (before the first dispatch and at drain). */
export async function checkSources(
  fs: FileSystem,
  pins: Readonly<Record<string, string>>,
): Promise<SourceCheck> {
  const mismatched: string[] = [];
  for (const [path, expected] of Object.entries(pins)) {
    if ((await sha256Of(fs, path)) !== expected) mismatched.push(path);
  }
  return { ok: mismatched.length === 0, checked: Object.keys(pins).length, mismatched };
}
