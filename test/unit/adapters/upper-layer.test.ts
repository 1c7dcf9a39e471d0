import { chownSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { layerHoldsAbove } from '../../../src/adapters/docker/upper-layer.js';

let dir: string;
let upper: string;
const overlay = (path: string = upper) => ({ Name: 'overlay2', Data: { UpperDir: path, LowerDir: '/x' } });

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'rg-upper-'));
  upper = join(dir, 'diff');
  mkdirSync(upper);
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe.skipIf(process.platform !== 'linux')(
  'layerHoldsAbove: the container layer at the first component of a path',
  () => {
    it('false when the layer holds nothing there; true for a folder, a file, or a link (never followed) there', () => {
      const sessions = '/root/.codex/sessions';
      expect(layerHoldsAbove(overlay(), sessions)).toBe(false);
      mkdirSync(join(upper, 'tmp'));
      writeFileSync(join(upper, 'tmp', 'outcome.json'), '{}');
      expect(layerHoldsAbove(overlay(), sessions)).toBe(false); // a change elsewhere
      mkdirSync(join(upper, 'root'));
      expect(layerHoldsAbove(overlay(), sessions)).toBe(true); // a folder above, copied up
      rmSync(join(upper, 'root'), { recursive: true });
      symlinkSync('/nowhere/at/all', join(upper, 'root')); // a dangling link the pair made
      expect(layerHoldsAbove(overlay(), sessions)).toBe(true);
      rmSync(join(upper, 'root'));
      writeFileSync(join(upper, 'root'), '');
      expect(layerHoldsAbove(overlay(), `${sessions}/`)).toBe(true);
      expect(layerHoldsAbove({ Name: 'overlay', Data: { UpperDir: upper } }, '/./root/x')).toBe(true); // Podman's name
    });

    it('null where this host cannot tell: another driver, no upper folder, one not here, a path not below /', () => {
      expect(layerHoldsAbove(undefined, '/root')).toBeNull();
      expect(layerHoldsAbove({ Name: 'btrfs', Data: { UpperDir: upper } }, '/root')).toBeNull();
      expect(layerHoldsAbove({ Name: 'overlay2', Data: null }, '/root')).toBeNull();
      expect(layerHoldsAbove({ Name: 'overlay2', Data: { UpperDir: 'relative/diff' } }, '/root')).toBeNull();
      expect(layerHoldsAbove(overlay(join(dir, 'not-here')), '/root')).toBeNull(); // a remote engine's folder
      expect(layerHoldsAbove(overlay(join(upper, 'file')), '/root')).toBeNull();
      // `..` anywhere: the container resolves it after a link, so no component read here is surely the copied one.
      mkdirSync(join(upper, 'root'));
      for (const path of ['/', 'root/x', '/../root', '', '/opt/../root/.codex/sessions', '/root/x/../y'])
        expect(layerHoldsAbove(overlay(), path), path).toBeNull();
    });

    it("null for an upper folder another user owns (not the engine's)", () => {
      if (process.getuid?.() !== 0) return; // chown needs root
      chownSync(upper, 65534, 65534);
      expect(layerHoldsAbove(overlay(), '/root')).toBeNull();
    });
  },
);
