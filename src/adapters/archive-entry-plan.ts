/** What an archive entry may become, decided from its tar header alone (pure), and the printable label of its name. */
import type { Header } from 'tar-stream';

const MAX_LABEL_CHARS = 120;

export type Plan =
  | { readonly kind: 'skip' }
  | { readonly kind: 'refuse'; readonly reason: string }
  | { readonly kind: 'file' | 'directory'; readonly segments: readonly string[] };

/** Printable, bounded form of an archive name for refusal strings. */
export function sanitizeLabel(name: string): string {
  // eslint-disable-next-line no-control-regex
  const printable = name.replace(/[\u0000-\u001f\u007f-\u009f]/g, '?');
  return printable.length > MAX_LABEL_CHARS ? `${printable.slice(0, MAX_LABEL_CHARS)}…` : printable;
}

const TYPE_LABELS: Readonly<Record<string, string>> = { link: 'hard link', symlink: 'symlink' };

/** Decides from the header alone what an entry may become; pure. */
export function planEntry(header: Pick<Header, 'name' | 'type'>, stripComponents: number): Plan {
  const label = sanitizeLabel(header.name);
  const refuse = (what: string): Plan => ({ kind: 'refuse', reason: `${what} refused: ${label}` });
  if (header.type !== 'file' && header.type !== 'directory')
    return refuse(TYPE_LABELS[header.type] ?? header.type);
  if (header.name.includes('\0')) return refuse('name with NUL');
  if (header.name.startsWith('/')) return refuse('absolute path');
  const parts = header.name.split('/').filter((part) => part !== '' && part !== '.');
  if (parts.includes('..')) return refuse('path traversal');
  const segments = parts.slice(stripComponents);
  if (segments.length > 0) return { kind: header.type, segments };
  return header.type === 'directory' ? { kind: 'skip' } : refuse('empty name');
}
