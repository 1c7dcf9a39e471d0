// The test kit's builders without an engine (constructing a container touches nothing), and its docs kept true.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { PairDriverContainer } from '../../src/testing/pair-driver-container.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const read = (path: string): string => readFileSync(`${ROOT}/${path}`, 'utf8');

describe('PairDriverContainer builder', () => {
  it("turns each typed method into the driver's action, in order", () => {
    const c = new PairDriverContainer()
      .withUsage(512)
      .withArmVerdict('accepted')
      .withOutcome({ providerStatus: 503 })
      .withSession('fail_then_success')
      .withSecretEcho('API_KEY')
      .withFakeSecrets()
      .withPrintEnv('HOME')
      .withEnvNames()
      .withGpuEnv()
      .withOutputBytes('stdout', 100)
      .withOutputBytes('stdout', 2_097_152, { big: true })
      .withNumberedLines(5, { slow: true })
      .withRunCount()
      .withSleep(0.5)
      .withIgnoreTerm()
      .withExitCode(3);
    expect(c.command()).toEqual([
      '/opt/driver/run',
      'usage=512',
      'arm=accepted',
      'outcome=provider_status=503',
      'session=fail_then_success',
      'echo_env=API_KEY',
      'fake_secrets',
      'print_env=HOME',
      'env',
      'gpu_env',
      'stdout_bytes=100',
      'big_stdout=2097152',
      'numbered_slow=5',
      'count',
      'sleep=0.5',
      'ignore_term',
      'exit=3',
    ]);
  });

  it("keeps the image's default with no action, and a script replaces the driver", () => {
    expect(new PairDriverContainer().command()).toBeUndefined();
    expect(new PairDriverContainer().withHang().withScript('exit 9').command()).toEqual([
      '/bin/sh',
      '-c',
      'exit 9',
    ]);
  });

  it('refuses what the driver cannot take (or would eval), naming the method and the rule', () => {
    const c = new PairDriverContainer();
    expect(() => c.withExitCode(-1)).toThrow(
      'PairDriverContainer.withExitCode: must be an integer from 0 to 255 (got -1)',
    );
    expect(() => c.withExitCode(1.5)).toThrow(RangeError);
    expect(() => c.withOutcome({ providerStatus: 42 })).toThrow(
      'withOutcome: must be an integer from 100 to 599 (got 42)',
    );
    expect(() => c.withSession({ echoEnv: '$(reboot)' })).toThrow(/withSession: must be a variable name/);
    expect(() => c.withPrintEnv('1X')).toThrow(/withPrintEnv: must be a variable name/);
    expect(() => c.withArmVerdict('a b')).toThrow(/withArmVerdict: must be letters, digits/);
    expect(() => c.withSleep(-1)).toThrow(/withSleep: must be a number of seconds/);
    expect(() => c.withNumberedLines(Number.NaN)).toThrow(/withNumberedLines/);
    expect(c.command()).toBeUndefined(); // nothing half-added
  });
});

describe('the test kit docs', () => {
  it('docs/testing.md holds the consumer example suite verbatim (the one the e2e test runs from npm pack)', () => {
    expect(read('docs/testing.md')).toContain(read('test/e2e/consumer/example.test.ts'));
  });

  it("README's example is test/integration/testing-kit-example.int.test.ts without its skips", () => {
    const example = read('test/integration/testing-kit-example.int.test.ts')
      .split('\n')
      .slice(1)
      .join('\n')
      .replace("import { noDocker } from '../support/docker.js';\n", '')
      .replaceAll('  if (noDocker) return;\n', '')
      .replaceAll('it.skipIf(noDocker)(', 'it(');
    expect(read('README.md')).toContain(example);
    expect(read('README.md')).toContain('[docs/testing.md](docs/testing.md)');
  });
});
