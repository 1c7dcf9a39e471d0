import { describe, expect, it } from 'vitest';
import { awaitEngineReturn, isEngineUnavailable } from '../../../../src/app/pair/engine-return.js';
import { silentLogger } from '../../../../src/app/ports/logger.js';
import { removeAndVerify } from '../../../../src/app/pair/remove-and-verify.js';
import { fakeTime } from '../../../support/fake-time.js';
import { engineError, ScriptedRuntime, state } from '../../../support/scripted-runtime.js';

const T0 = Date.parse('2026-12-03T08:00:00Z');

describe('awaitEngineReturn (only the injected clock)', () => {
  it('probes with backoff until the engine answers, and says when it did', async () => {
    const runtime = new ScriptedRuntime();
    runtime.present = true;
    runtime.inspects = ['refused', 'refused', 'refused', state('running', null)];
    const time = fakeTime('2026-12-03T08:00:00Z');
    const back = await awaitEngineReturn({ runtime: runtime, ...time }, 'c1', {
      untilMs: T0 + 60_000,
    });
    expect(back).toEqual({
      kind: 'answered',
      state: state('running', null),
      answeredAtMs: T0 + 250 + 500 + 1_000,
    });
  });

  it('gives up at its deadline, never probing past it', async () => {
    const runtime = new ScriptedRuntime();
    runtime.present = true;
    runtime.inspects = ['refused'];
    const time = fakeTime('2026-12-03T08:00:00Z');
    expect(
      await awaitEngineReturn({ runtime: runtime, ...time }, 'c1', {
        untilMs: T0 + 5_000,
      }),
    ).toEqual({ kind: 'deadline' });
    expect(time.nowMs()).toBe(T0 + 5_000);
  });

  it('ends at once on an aborted signal', async () => {
    const runtime = new ScriptedRuntime();
    const signal = AbortSignal.abort();
    expect(
      await awaitEngineReturn({ runtime: runtime, ...fakeTime() }, 'c1', {
        untilMs: Number.MAX_SAFE_INTEGER,
        signal,
      }),
    ).toEqual({ kind: 'aborted' });
  });

  it('knows an unanswered engine from an engine verdict', () => {
    expect(isEngineUnavailable(engineError('engine_unavailable', null))).toBe(true);
    expect(isEngineUnavailable(engineError('engine_error'))).toBe(false);
    expect(isEngineUnavailable(new Error('x'))).toBe(false);
  });
});

describe('removeAndVerify', () => {
  it('stops a running container before removing it, and polls through an engine hiccup until the 404', async () => {
    const runtime = new ScriptedRuntime();
    runtime.present = true;
    runtime.inspects = [state('running', null), 'refused', state('exited', 0), null];
    runtime.removeTakesNoEffect = true; // the engine takes its time: the removal shows on the third look
    const removal = await removeAndVerify(
      {
        runtime,
        logger: silentLogger,
        verifyAbsentTimeoutMs: 3_000,
        ...fakeTime(),
      },
      'c1',
      4,
    );
    expect(removal).toEqual({ removed: true, verified_absent: true, attempts: 1 });
    expect(runtime.stops).toEqual([{ id: 'c1', timeoutSec: 4 }]);
  });

  it('a container already gone is verified absent at once, without a removal', async () => {
    const runtime = new ScriptedRuntime();
    expect(
      await removeAndVerify({ runtime, logger: silentLogger, clock: fakeTime().clock }, 'c1', 4),
    ).toEqual({
      removed: false,
      verified_absent: true,
      attempts: 1,
    });
    expect(runtime.calls).toEqual([]);
  });

  it('a container the caller saw exited is removed without a look first (issue 39); a failed round looks as usual', async () => {
    const looked: string[] = [];
    const runtime = new ScriptedRuntime();
    runtime.present = true;
    const inspect = runtime.inspect.bind(runtime);
    runtime.inspect = () => {
      looked.push(runtime.calls.includes('remove') ? 'after remove' : 'before remove');
      return inspect();
    };
    const deps = { runtime, logger: silentLogger, ...fakeTime() };
    expect(await removeAndVerify(deps, 'c1', 4, { exited: true })).toEqual({
      removed: true,
      verified_absent: true,
      attempts: 1,
    });
    expect(looked).toEqual(['after remove']); // only the 404 that proves it gone
    expect(runtime.stops).toEqual([]);

    // Its first removal refused: the second round looks (and stops a container that runs again) as without the flag.
    const again = new ScriptedRuntime();
    again.present = true;
    let refusals = 1;
    const remove = again.remove.bind(again);
    again.remove = () => (refusals-- > 0 ? Promise.reject(engineError('engine_error')) : remove());
    again.inspects = [state('running', null), state('running', null), null];
    const removal = await removeAndVerify(
      { runtime: again, logger: silentLogger, verifyAbsentTimeoutMs: 300, ...fakeTime() },
      'c1',
      4,
      { exited: true },
    );
    expect(removal).toEqual({ removed: true, verified_absent: true, attempts: 2 });
    expect(again.stops).toEqual([{ id: 'c1', timeoutSec: 4 }]);
  });

  it('a removal refused every time is unverified after three attempts', async () => {
    const runtime = new ScriptedRuntime();
    runtime.present = true;
    runtime.remove = () => Promise.reject(engineError('engine_error'));
    const time = fakeTime();
    expect(
      await removeAndVerify(
        {
          runtime,
          logger: silentLogger,
          verifyAbsentTimeoutMs: 900,
          ...time,
        },
        'c1',
        4,
      ),
    ).toEqual({ removed: false, verified_absent: false, attempts: 3 });
  });
});
