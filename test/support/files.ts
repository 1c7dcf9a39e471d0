import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * The regular files under `dir` (which must exist). A folder below it that goes while it is walked (a server's
 * temporary download folder removed as its response ends) held nothing any more: it is left out, not an error.
 */
export async function listFilesRecursively(dir: string): Promise<string[]> {
  return walk(dir, true);
}

async function walk(dir: string, top: boolean): Promise<string[]> {
  const out: string[] = [];
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch (err) {
    if (!top && (err as NodeJS.ErrnoException).code === 'ENOENT') return out;
    throw err;
  }
  for (const entry of entries) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await walk(path, false)));
    else if (entry.isFile()) out.push(path);
  }
  return out;
}

/** Sliding windows of `width` characters of each needle (the whole needle when shorter). */
export function windowsOf(needles: readonly string[], width = 8): string[] {
  const set = new Set<string>();
  for (const n of needles) {
    if (n.length <= width) set.add(n);
    else for (let i = 0; i + width <= n.length; i++) set.add(n.slice(i, i + width));
  }
  return [...set];
}

/** Which forms of `secret` (raw, base64, URL-encoded) appear in the file, by 8-character windows of each. */
export async function scanForSecret(file: string, secret: string): Promise<string[]> {
  // A file removed since it was listed (a temporary one) holds nothing any more.
  const bytes = await readFile(file).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return Buffer.alloc(0);
    throw err;
  });
  const text = bytes.toString('latin1');
  const forms = [secret, Buffer.from(secret).toString('base64'), encodeURIComponent(secret)];
  // Base64 of a secret at other alignments shares long runs with its own base64; the raw windows catch
  // the secret itself. Windows of the random part only, so common prefixes like "s3cr3t-" don't match noise.
  const hits: string[] = [];
  for (const w of windowsOf(
    forms.map((f) => f.slice(7)),
    12,
  ))
    if (text.includes(w)) hits.push(w);
  return hits;
}
