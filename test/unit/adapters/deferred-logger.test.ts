import { describe, expect, it } from 'vitest';
import { deferredLogger } from '../../../src/adapters/deferred-logger.js';
import type { Logger } from '../../../src/app/ports/logger.js';

/** A logger that records every line with the bindings of its chain. */
function recordingLogger(lines: string[], bindings: Record<string, unknown> = {}): Logger {
  const line =
    (level: string) =>
    (fields: Record<string, unknown>, message: string): void => {
      lines.push(`${level} ${JSON.stringify({ ...bindings, ...fields })} ${message}`);
    };
  return {
    debug: line('debug'),
    info: line('info'),
    warn: line('warn'),
    error: line('error'),
    child: (more) => recordingLogger(lines, { ...bindings, ...more }),
  };
}

describe('deferredLogger: the real logger is built on the first line the level lets through', () => {
  it('builds nothing for lines below the level, then builds once and passes every line on', () => {
    const lines: string[] = [];
    let built = 0;
    const logger = deferredLogger('warn', () => {
      built += 1;
      return recordingLogger(lines);
    });
    logger.debug({ a: 1 }, 'below');
    logger.info({ a: 2 }, 'below too');
    expect(built).toBe(0);
    logger.warn({ a: 3 }, 'first');
    logger.error({ a: 4 }, 'second');
    logger.info({ a: 5 }, 'still below');
    expect(built).toBe(1);
    expect(lines).toEqual(['warn {"a":3} first', 'error {"a":4} second']);
  });

  it("a child carries its bindings to the real logger's child, built on its own first line", () => {
    const lines: string[] = [];
    let built = 0;
    const logger = deferredLogger('info', () => {
      built += 1;
      return recordingLogger(lines);
    });
    const child = logger.child({ job: 'j1' }).child({ attempt: 2 });
    child.debug({}, 'below');
    expect(built).toBe(0);
    child.info({ x: true }, 'from the child');
    logger.info({}, 'from the parent');
    expect(built).toBe(1);
    expect(lines).toEqual([
      'info {"job":"j1","attempt":2,"x":true} from the child',
      'info {} from the parent',
    ]);
  });

  it('silent builds nothing ever; a level it does not know is handed to make at once (pino refuses it there)', () => {
    let built = 0;
    const silent = deferredLogger('silent', () => {
      built += 1;
      return recordingLogger([]);
    });
    silent.error({}, 'dropped');
    expect(built).toBe(0);
    // An inherited name is no level of ours either: pino is asked at once, as for any other unknown one.
    for (const name of ['toString', 'constructor']) {
      const before = built;
      deferredLogger(name, () => {
        built += 1;
        return recordingLogger([]);
      });
      expect(built).toBe(before + 1);
    }
    expect(() =>
      deferredLogger('loud', () => {
        throw new Error('unknown level loud');
      }),
    ).toThrow('unknown level loud');
  });

  it('a line whose logger cannot be built throws nothing; the next line tries again and gets through', () => {
    const lines: string[] = [];
    let attempts = 0;
    const logger = deferredLogger('warn', () => {
      attempts += 1;
      if (attempts === 1) throw Object.assign(new Error('too many open files'), { code: 'EMFILE' });
      return recordingLogger(lines);
    });
    expect(() => logger.error({ secret: 'x' }, 'first, when nothing could be opened')).not.toThrow();
    logger.error({ a: 1 }, 'second');
    expect(attempts).toBe(2);
    expect(lines).toEqual(['error {"a":1} second']);
  });

  it('now: built at once, for a long-running process', () => {
    let built = 0;
    deferredLogger(
      'warn',
      () => {
        built += 1;
        return recordingLogger([]);
      },
      true,
    );
    expect(built).toBe(1);
  });
});
