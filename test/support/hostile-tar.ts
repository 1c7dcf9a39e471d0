import { Readable } from 'node:stream';
import { buffer } from 'node:stream/consumers';
import { pack } from 'tar-stream';
import type { Header, Pack } from 'tar-stream';

/**
 * Builders of (hostile) tar streams for the safe-extraction tests, all made with tar-stream's
 * pack. Large archives are generated lazily, with backpressure, and count what was pulled so a
 * test can prove the extractor stopped early.
 */

export interface TarEntrySpec {
  readonly name: string;
  readonly type?: Header['type'];
  readonly body?: string | Buffer;
  readonly linkname?: string;
  readonly mode?: number;
}

function headerOf(spec: TarEntrySpec): Header {
  const type = spec.type ?? 'file';
  const size = type === 'file' ? Buffer.byteLength(spec.body ?? '') : 0;
  return {
    name: spec.name,
    type,
    size,
    mode: spec.mode ?? (type === 'directory' ? 0o755 : 0o644),
    mtime: new Date(0),
    linkname: spec.linkname ?? '',
    uid: 0,
    gid: 0,
    uname: '',
    gname: '',
    devmajor: 0,
    devminor: 0,
  };
}

function addEntry(archive: Pack, spec: TarEntrySpec): Promise<void> {
  const header = headerOf(spec);
  const body = header.type === 'file' ? (spec.body ?? '') : '';
  return new Promise((resolve, reject) => {
    archive.entry(header, body, (err) => (err ? reject(err) : resolve()));
  });
}

/** The whole archive as bytes (small archives only). */
export async function tarBytes(entries: readonly TarEntrySpec[]): Promise<Buffer> {
  const archive = pack();
  const collected = buffer(archive);
  for (const spec of entries) await addEntry(archive, spec);
  archive.finalize();
  return collected;
}

/** A Node readable of the archive, like dockerode's `getArchive` response. */
export async function tarStream(entries: readonly TarEntrySpec[]): Promise<Readable> {
  return Readable.from([await tarBytes(entries)]);
}

/** Emits `bytes` then fails like a vanished container (`ECONNRESET`). */
export function failingStream(bytes: Buffer, code = 'ECONNRESET'): Readable {
  let sent = false;
  return new Readable({
    read() {
      if (!sent) {
        sent = true;
        this.push(bytes);
        return;
      }
      this.destroy(Object.assign(new Error('socket hang up'), { code }));
    },
  });
}

export interface LazyArchive {
  readonly stream: Readable;
  /** Entries (or bytes, for a huge entry) handed to the packer so far. */
  pulled(): number;
}

/** `count` tiny files `root/f<i>.txt`, produced only as fast as the consumer reads. */
export function lazyManyFiles(root: string, count: number): LazyArchive {
  const archive = pack();
  let produced = 0;
  const produce = async (): Promise<void> => {
    for (let i = 0; i < count; i += 1) {
      await addEntry(archive, { name: `${root}/f${i}.txt`, body: `file ${i}\n` });
      produced += 1;
    }
    archive.finalize();
  };
  produce().catch(() => undefined); // stops when the consumer destroys the archive
  return { stream: Readable.from(archive), pulled: () => produced };
}

function drainedOrClosed(sink: Sink): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      sink.off('drain', done);
      sink.off('close', done);
      resolve();
    };
    sink.on('drain', done);
    sink.on('close', done);
  });
}

type Sink = ReturnType<Pack['entry']>;

/** One file entry whose header declares `sizeBytes`; its data is generated on demand. */
export function lazyHugeEntry(name: string, sizeBytes: number, chunkBytes = 64 * 1024): LazyArchive {
  const archive = pack();
  let pulledBytes = 0;
  const sink = archive.entry({ name, size: sizeBytes, type: 'file', mode: 0o644 });
  const chunk = Buffer.alloc(chunkBytes, 0x61);
  const produce = async (): Promise<void> => {
    while (pulledBytes < sizeBytes && !sink.destroyed && !archive.destroyed) {
      const piece = chunk.subarray(0, Math.min(chunkBytes, sizeBytes - pulledBytes));
      pulledBytes += piece.length;
      if (!sink.write(piece)) await drainedOrClosed(sink);
    }
    if (!sink.destroyed) sink.end(null);
    archive.finalize();
  };
  produce().catch(() => undefined);
  return { stream: Readable.from(archive), pulled: () => pulledBytes };
}
