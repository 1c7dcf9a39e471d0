import { defineConfig } from 'vitest/config';

// CI (CI=true, `.ci/run`) runs a failed test once more: two cores shared by five suites make a rare timing flake; a
// test that fails twice fails CI, and one that passed only on its retry is named at the end of CI's log
// (scripts/ci-summary.js), a flake to fix. Locally a test runs once.
const retry = process.env.CI === 'true' ? 1 : 0;

export default defineConfig({
  test: {
    // `npm run coverage`: unit-test coverage of src/ (v8); CI does not run it.
    coverage: {
      provider: 'v8',
      include: ['src/**/*.ts'],
      reporter: ['text-summary', 'json-summary'],
      reportsDirectory: 'coverage',
    },
    projects: [
      {
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          environment: 'node',
          testTimeout: 20_000,
          retry,
        },
      },
      {
        test: {
          name: 'integration',
          include: ['test/integration/**/*.int.test.ts', 'test/e2e/**/*.e2e.test.ts'],
          environment: 'node',
          testTimeout: 180_000,
          hookTimeout: 180_000,
          retry,
          // One engine, two cores: integration files run one at a time.
          fileParallelism: false,
          globalSetup: ['test/support/global-setup.ts'],
          // A cache folder of its own per file (what the sessions-copy skip learned stays in the file).
          setupFiles: ['test/support/isolated-cache.ts'],
          // The shared engine's host firewall is not ours to change: pairs on network "bridge" use the engine's default
          // bridge there. The guarded network is tested on a throwaway engine in its own namespace (pair-network.int).
          // No image can be pulled here, Ryuk's neither: testcontainers runs without its reaper, and the test kit's
          // owner sweep (src/testing/leftovers.ts) removes what a killed run leaves.
          env: { ROBOGUIDE_PAIRS_NETWORK: 'engine-bridge', TESTCONTAINERS_RYUK_DISABLED: 'true' },
        },
      },
    ],
  },
});
