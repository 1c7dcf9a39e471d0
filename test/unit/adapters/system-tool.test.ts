import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { iptablesRunner } from '../../../src/adapters/docker/docker-pair-network.js';
import { systemTool } from '../../../src/adapters/system-tool.js';

let dir: string;
let savedPath: string | undefined;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-system-tool-'));
  savedPath = process.env.PATH;
});
afterEach(async () => {
  process.env.PATH = savedPath;
  await rm(dir, { recursive: true, force: true });
});

/** A program planted first on PATH (a home subfolder a session mounted): it leaves a marker when it runs. */
async function plant(name: string): Promise<string> {
  const marker = join(dir, `${name}.ran`);
  await writeFile(join(dir, name), `#!/bin/sh\necho planted > ${marker}\n`);
  await chmod(join(dir, name), 0o755);
  process.env.PATH = `${dir}:${savedPath ?? ''}`;
  return marker;
}

describe('root-run helper programs come from the system folders, never from PATH', () => {
  it('systemTool names the system copy whatever PATH holds, and a path that fails with ENOENT when there is none', async () => {
    await plant('mount');
    expect(systemTool('mount')).toMatch(/^\/(usr\/)?s?bin\/mount$/);
    expect(systemTool('roboguide-no-such-tool')).toBe('/usr/bin/roboguide-no-such-tool');
    expect(systemTool('/opt/x/tool')).toBe('/opt/x/tool');
    expect(systemTool('mount', [dir])).toBe(join(dir, 'mount'));
  });

  it('the iptables runner (and its nsenter prefix) never runs a planted iptables first on PATH', async () => {
    const iptables = await plant('iptables');
    const nsenter = await plant('nsenter');
    await iptablesRunner()('ipv4', ['-S', 'ROBOGUIDE-NO-SUCH-CHAIN']).catch(() => undefined);
    await iptablesRunner(['nsenter', '--net=/proc/self/ns/net'])('ipv4', [
      '-S',
      'ROBOGUIDE-NO-SUCH-CHAIN',
    ]).catch(() => undefined);
    await expect(readFile(iptables, 'utf8')).rejects.toMatchObject({ code: 'ENOENT' });
    await expect(readFile(nsenter, 'utf8')).rejects.toMatchObject({ code: 'ENOENT' });
  });
});
