import { describe, expect, it } from 'vitest';
import { invokedAs } from '../../../src/core/invoked-as.js';

const base = { pathDirs: ['/usr/local/bin', '/home/u/.local/bin'], cwd: '/home/u/roboguide-eval' };

describe('invokedAs: the command hints name (never npx)', () => {
  it("the checkout's launcher as typed", () => {
    expect(
      invokedAs({ ...base, launcher: 'bin/roboguide-eval', script: '/home/u/roboguide-eval/bin/run.js' }),
    ).toBe('bin/roboguide-eval');
    expect(invokedAs({ ...base, launcher: './bin/roboguide-eval', script: undefined })).toBe(
      './bin/roboguide-eval',
    );
  });

  it('a link on PATH by its name; an absolute launcher path as typed (issue 40); a script path relative under the working directory', () => {
    expect(invokedAs({ ...base, launcher: '/home/u/.local/bin/roboguide-eval', script: undefined })).toBe(
      'roboguide-eval',
    );
    expect(
      invokedAs({ ...base, launcher: '/home/u/roboguide-eval/bin/roboguide-eval', script: undefined }),
    ).toBe('/home/u/roboguide-eval/bin/roboguide-eval');
    expect(invokedAs({ ...base, launcher: undefined, script: '/home/u/roboguide-eval/bin/run.js' })).toBe(
      'bin/run.js',
    );
  });

  it("an installed package's binary (node_modules/.bin on PATH under npm exec) by its name; nothing known: roboguide-eval", () => {
    expect(
      invokedAs({
        pathDirs: ['/p/node_modules/.bin'],
        cwd: '/p',
        launcher: undefined,
        script: '/p/node_modules/.bin/roboguide-eval',
      }),
    ).toBe('roboguide-eval');
    expect(invokedAs({ ...base, launcher: '', script: undefined })).toBe('roboguide-eval');
  });
});
