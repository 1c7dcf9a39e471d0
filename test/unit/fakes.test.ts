import { describe, expect, it } from 'vitest';
import { fakeRuntime, UnscriptedRuntime } from '../support/fakes.js';

/** The test kit's fakes fail by name where a test did not foresee a call, and leave optional capabilities absent. */
describe('the typed fakes of test/support/fakes.ts', () => {
  it('fakeRuntime: a given member answers, an optional capability left out is absent, any other throws by name', async () => {
    const runtime = fakeRuntime({ imageExists: () => Promise.resolve(true) });
    expect(await runtime.imageExists('img')).toBe(true);
    expect('gpuGrantOf' in runtime || 'imageId' in runtime).toBe(false);
    expect(Reflect.get(runtime, 'gpuGrantOf')).toBeUndefined();
    expect(() => Reflect.get(runtime, 'info')).toThrow('ContainerRuntime.info is not faked');
  });

  it('UnscriptedRuntime: a subclass answers what it overrides; the rest rejects naming the class and the method', async () => {
    class OnlyInspect extends UnscriptedRuntime {
      override inspect(): Promise<null> {
        return Promise.resolve(null);
      }
    }
    const runtime = new OnlyInspect();
    expect(await runtime.inspect()).toBeNull();
    await expect(runtime.remove('c1')).rejects.toThrow('OnlyInspect.remove is not scripted');
    expect('collectMounts' in runtime).toBe(false);
  });
});
