import { defineConfig } from 'vitest/config';

/**
 * `npm run test:gvisor` (issue 29): pairs and sessions under gVisor (runsc) on a throwaway engine in its own network
 * namespace (test/gvisor). Kept out of `npm test`'s projects: `.ci/run` runs it beside the main suite.
 */
export default defineConfig({
  test: {
    name: 'gvisor',
    include: ['test/gvisor/**/*.test.ts'],
    environment: 'node',
    testTimeout: 180_000,
    hookTimeout: 180_000,
    // As in vitest.config.ts: under CI a failed test runs once more, and `.ci/run` names it at the end of its log.
    retry: process.env.CI === 'true' ? 1 : 0,
    fileParallelism: false,
    globalSetup: ['test/support/global-setup.ts'],
    // A cache folder of its own per file (what the sessions-copy skip learned stays in the file).
    setupFiles: ['test/support/isolated-cache.ts'],
    env: { ROBOGUIDE_PAIRS_NETWORK: 'engine-bridge' },
  },
});
