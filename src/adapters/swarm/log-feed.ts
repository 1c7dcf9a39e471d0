import { PassThrough, Writable, type Readable } from 'node:stream';
import { demultiplex } from '../docker/demux.js';

/**
 * The service log API with `follow` never ends (not even when the service is removed). A feed forwards the followed
 * bytes and counts them per stream; once the task is terminal, `complete` reads the whole log once more (that read
 * ends) and forwards only the bytes past those counts, then ends both streams: each byte once, nothing lost.
 */
export class LogFeed {
  readonly stdout = new PassThrough();
  readonly stderr = new PassThrough();
  #counts = { stdout: 0, stderr: 0 };
  #completing = false;
  #completed: Promise<void> | null = null;
  #source: Readable | null = null;

  attachSource(source: Readable): void {
    this.#source = source;
    const forward = (name: 'stdout' | 'stderr'): Writable =>
      new Writable({
        write: (chunk: Buffer, _enc, done) => {
          if (this.#completing) return done();
          this.#counts[name] += chunk.length;
          const target = this[name];
          if (target.destroyed || target.write(chunk)) done();
          else target.once('drain', () => done());
        },
      });
    // Ignored: a follow that fails (manager connection reset) loses nothing, since completion re-reads the whole log.
    demultiplex(source, forward('stdout'), forward('stderr')).catch(() => undefined);
  }

  /** No more bytes will come (the node is gone): end both streams with what was delivered. */
  endNow(): void {
    this.#completing = true;
    this.#source?.destroy();
    this.#completed ??= Promise.resolve();
    this.stdout.end();
    this.stderr.end();
  }

  /** Never rejects: a log that cannot be read to its end ends both streams in error instead. */
  complete(readAll: () => Promise<Readable>, timeoutMs: number): Promise<void> {
    return (this.#completed ??= (async () => {
      this.#completing = true;
      this.#source?.destroy();
      const skip = { ...this.#counts };
      const rest = (name: 'stdout' | 'stderr'): Writable =>
        new Writable({
          write: (chunk: Buffer, _enc, done) => {
            let part = chunk;
            if (skip[name] >= part.length) {
              skip[name] -= part.length;
              return done();
            }
            part = part.subarray(skip[name]);
            skip[name] = 0;
            const target = this[name];
            if (target.destroyed || target.write(part)) done();
            else target.once('drain', () => done());
          },
        });
      try {
        const all = await readAll();
        const timer = setTimeout(() => all.destroy(new Error('log completion timed out')), timeoutMs);
        try {
          await demultiplex(all, rest('stdout'), rest('stderr'));
        } finally {
          clearTimeout(timer);
        }
        this.stdout.end();
        this.stderr.end();
      } catch (err) {
        // The log could not be read to its end (the node is gone): the streams end in error, never as complete.
        this.stdout.destroy(err as Error);
        this.stderr.destroy(err as Error);
      }
    })());
  }
}
