import { extract, pack } from 'tar-stream';

/** A tar of these files (0644), in memory: an archive body for the serve API. */
export function tarOf(files: Record<string, string | Buffer>): Promise<Buffer> {
  const p = pack();
  for (const [name, content] of Object.entries(files)) p.entry({ name, mode: 0o644 }, content);
  p.finalize();
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    p.on('data', (c: unknown) => chunks.push(c as Buffer));
    p.on('end', () => resolve(Buffer.concat(chunks)));
    p.on('error', reject);
  });
}

/** The regular files of a tar, by name, as UTF-8 text. */
export async function untar(bytes: Buffer): Promise<Record<string, string>> {
  const files: Record<string, string> = {};
  const x = extract();
  const done = (async () => {
    for await (const entry of x) {
      const chunks: Buffer[] = [];
      for await (const c of entry) chunks.push(c as Buffer);
      if (entry.header.type === 'file') files[entry.header.name] = Buffer.concat(chunks).toString('utf8');
    }
  })();
  x.end(bytes);
  await done;
  return files;
}
