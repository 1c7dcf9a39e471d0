import { PassThrough, type Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { collectSessions, findByClaim, unwatchedStop } from '../../../../src/app/pair/pair-collection.js';
import { silentLogger } from '../../../../src/app/ports/logger.js';
import { fakeTime } from '../../../support/fake-time.js';
import { engineError, ScriptedRuntime, state } from '../../../support/scripted-runtime.js';

const T0 = Date.parse('2026-12-03T08:00:00Z');

/** A runtime whose archive call is refused `refusals` times, then answers with a stream. */
function archiveRefused(refusals: number): ScriptedRuntime & { archives: number } {
  const runtime = Object.assign(new ScriptedRuntime(), { archives: 0 });
  runtime.present = true;
  runtime.getArchive = (): Promise<Readable | null> => {
    runtime.archives++;
    return runtime.archives <= refusals
      ? Promise.reject(engineError('engine_unavailable', null))
      : Promise.resolve(new PassThrough().end());
  };
  return runtime;
}

function sessionsDeps(runtime: ScriptedRuntime, got: unknown[]) {
  return {
    runtime: runtime,
    ...fakeTime(),
    collectSessions: (archive: Readable | null | 'empty') => {
      got.push(archive === null || archive === 'empty' ? archive : 'archive');
      return Promise.resolve({ files: 0, bytes: 0, refusals: [] });
    },
    collectionEngineWaitMs: 5_000,
  };
}

describe('the sessions copy through an engine that went away', () => {
  it('a refused archive call is retried once the engine answers again', async () => {
    const runtime = archiveRefused(1);
    const got: unknown[] = [];
    await collectSessions(sessionsDeps(runtime, got), 'c1', '/s', 'engine_restarted', null);
    expect(runtime.archives).toBe(2);
    expect(got).toEqual(['archive']);
  });

  it('is not waited for after engine_unreachable or a lost node: the refusal stands', async () => {
    for (const loss of ['engine_unreachable', 'node_lost'] as const) {
      const runtime = archiveRefused(1);
      await expect(collectSessions(sessionsDeps(runtime, []), 'c1', '/s', loss, null)).rejects.toThrow();
      expect(runtime.archives).toBe(1);
    }
  });

  it('an engine that does not answer within the collection wait keeps the refusal', async () => {
    const runtime = archiveRefused(5);
    runtime.inspects = ['refused'];
    await expect(collectSessions(sessionsDeps(runtime, []), 'c1', '/s', null, null)).rejects.toThrow(
      /engine_unavailable/,
    );
  });
});

describe('findByClaim', () => {
  it('asks three times, then says the engine could not be asked', async () => {
    const runtime = new ScriptedRuntime();
    let asked = 0;
    runtime.listByLabel = () => (asked++, Promise.reject(engineError('engine_unavailable', null)));
    const time = fakeTime();
    expect(await findByClaim(runtime, { 'roboguide.claim': 'k' }, time.clock)).toEqual({
      id: null,
      known: false,
    });
    expect(asked).toBe(3);
  });

  it('without a claim label there is nothing to look for', async () => {
    expect(await findByClaim(new ScriptedRuntime(), {}, fakeTime().clock)).toEqual({ id: null, known: true });
  });
});

describe('unwatchedStop (reattach)', () => {
  const window = { claimedAtMs: T0, deadlineMs: T0 + 60_000 };
  it('an engine history that cannot be read gives no verdict', async () => {
    const runtime = new ScriptedRuntime();
    runtime.present = true;
    runtime.inspects = [state('exited', 0, '2026-12-03T08:00:30Z')];
    runtime.containerEventsSince = () => Promise.reject(engineError('engine_error'));
    expect(await unwatchedStop({ runtime: runtime, logger: silentLogger }, 'c1', window)).toBeNull();
  });

  it('a running container, or a history with its start, is no unwatched restart', async () => {
    const running = new ScriptedRuntime();
    running.present = true;
    running.inspects = [state('running', null)];
    expect(await unwatchedStop({ runtime: running, logger: silentLogger }, 'c1', window)).toBeNull();
    const started = new ScriptedRuntime();
    started.present = true;
    started.inspects = [state('exited', 0, '2026-12-03T08:00:30Z')];
    started.events = { actions: ['start', 'kill', 'die'], complete: true };
    expect(await unwatchedStop({ runtime: started, logger: silentLogger }, 'c1', window)).toBeNull();
    expect(started.eventsSince).toEqual([T0]);
  });
});
