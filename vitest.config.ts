import { defineConfig } from 'vitest/config';

// CI (CI=true, `.ci/run`) runs a failed test once more: two cores shared by five suites make a rare timing flake; a
// test that fails twice fails CI, and one that passed only on its retry is named at the end of CI's log
// (scripts/ci-summary.js), a flake to fix. Locally a test runs once.
const retry = process.env.CI === 'true' ? 1 : 0;

const INTEGRATION_FILES = ['test/integration/**/*.int.test.ts', 'test/e2e/**/*.e2e.test.ts'];

/**
 * The integration files that bring services of their own (a throwaway engine or swarm, PostgreSQL, an image registry,
 * Prometheus, the Python client's own server): a second lane, one file at a time in a vitest process of its own beside
 * the first (`npm test`, scripts/test-lanes.js; one vitest runs every project whose files go one at a time in a single
 * queue). Each names its containers by labels of its own and starts its services on ports the kernel picks (the image
 * registry's fixed port is this file's alone), so the lanes share only the engine and the two cores. With one lane
 * the suite spent most of its time waiting on containers and services (CI: 25 of 80 CPU-minutes).
 */
const SERVICE_FILES = [
  'test/integration/image-plan.int.test.ts',
  'test/integration/swarm.int.test.ts',
  'test/integration/swarm-images.int.test.ts',
  'test/integration/swarm-image-pulls.int.test.ts',
  'test/integration/engine-restart.int.test.ts',
  'test/integration/pair-network.int.test.ts',
  'test/integration/pair-network-watch.int.test.ts',
  'test/integration/gpu-device-requests.int.test.ts',
  'test/integration/egress-restart.int.test.ts',
  'test/integration/egress-allowlist.int.test.ts',
  'test/integration/harbor-egress.int.test.ts',
  'test/integration/session-egress.int.test.ts',
  'test/integration/registry-faults.postgres.int.test.ts',
  'test/integration/registry-scale.int.test.ts',
  'test/integration/registry-password.postgres.int.test.ts',
  'test/integration/python-adapters.int.test.ts',
  'test/integration/metrics-prometheus.int.test.ts',
  // Not a service of its own: the mount race loops (three minutes, a sixth of the first lane) even the lanes out.
  'test/integration/mount-redirection.int.test.ts',
];

/** An integration lane: its files one at a time against the one engine, with the suite's set-up. */
function integrationProject(
  name: string,
  files: { readonly include?: string[]; readonly exclude?: string[] },
): { test: Record<string, unknown> } {
  return {
    test: {
      name,
      include: files.include ?? INTEGRATION_FILES,
      ...(files.exclude ? { exclude: files.exclude } : {}),
      environment: 'node',
      testTimeout: 180_000,
      hookTimeout: 180_000,
      retry,
      // One engine, two cores: a lane runs its files one at a time (two lanes: see SERVICE_FILES).
      fileParallelism: false,
      // Once per vitest process, whichever project starts first (the build, the images, the engine's facts).
      globalSetup: ['test/support/global-setup.ts'],
      // A cache folder of its own per file (what the sessions-copy skip learned stays in the file).
      setupFiles: ['test/support/isolated-cache.ts'],
      // The shared engine's host firewall is not ours to change: pairs on network "bridge" use the engine's default
      // bridge there. The guarded network is tested on a throwaway engine in its own namespace (pair-network.int).
      // No image can be pulled here, Ryuk's neither: testcontainers runs without its reaper, and the test kit's
      // owner sweep (src/testing/leftovers.ts) removes what a killed run leaves.
      env: { ROBOGUIDE_PAIRS_NETWORK: 'engine-bridge', TESTCONTAINERS_RYUK_DISABLED: 'true' },
    },
  };
}

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
          // Under CI the unit tests start beside five suites starting engines and building images on two cores: a
          // test of real files ran 14 times slower there than alone (safe-extract's 1,000 files: 1.5 s alone, over
          // 20 s in CI). A time limit, not a measure: a hang still fails.
          testTimeout: process.env.CI === 'true' ? 60_000 : 20_000,
          retry,
        },
      },
      integrationProject('integration', { exclude: SERVICE_FILES }),
      integrationProject('integration-services', { include: SERVICE_FILES }),
    ],
  },
});
