import { fileURLToPath } from 'node:url';
import { Config } from '@oclif/core/config';
import { describe, expect, it } from 'vitest';
import { BaseCommand } from '../../../src/cli/base-command.js';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));

/** A command of ours that says which config it was given and with which arguments. */
class Probe extends BaseCommand {
  static override description = 'a probe';
  override run(): Promise<{ config: Config; argv: string[] }> {
    return Promise.resolve({ config: this.config, argv: this.argv });
  }
}

describe('BaseCommand.run: the config oclif loaded is the one the command gets', () => {
  it('given a loaded config (what oclif passes a command it found), runs with that very config, not a second one loaded from it', async () => {
    const config = await Config.load(ROOT);
    const loads = { count: 0 };
    // Any Config loaded from here on (oclif's reload makes a new one and loads it) is counted on the prototype.
    const proto = Config.prototype;
    const protoLoad = Object.getOwnPropertyDescriptor(proto, 'load')?.value as (
      this: Config,
    ) => Promise<void>;
    proto.load = function (this: Config) {
      loads.count += 1;
      return protoLoad.call(this);
    };
    try {
      const result = await Probe.run(['--json'], config);
      expect(result.config).toBe(config);
      expect(result.argv).toEqual(['--json']);
      expect(loads.count).toBe(0);
    } finally {
      proto.load = protoLoad;
    }
  });

  it('given a root path instead, loads the config there as oclif does', async () => {
    const result = await Probe.run([], ROOT);
    expect(result.config).toBeInstanceOf(Config);
    expect(result.config.root).toBe(ROOT.replace(/\/$/, ''));
    expect(result.config.bin).toBe('roboguide-eval');
  });
});
