/**
 * The secret machine's builder in typed arrays and steps (issue 39, twelfth stop: a 4 KB secret held serve's event
 * loop about 0.6 s while it compiled) builds exactly the machine of the builder before it, array for array, whether
 * compiled at once or a step at a time; and a compile in steps yields often enough that no step is long.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  compileSecretMachine,
  compileSecretMachineInSteps,
  type SecretMachine,
} from '../../src/core/redaction/secret-machine.js';
import { referenceSecretMachine } from './redaction-machine-reference.js';
import { seededRandom } from '../support/seeded-random.js';

const ALPHABETS = [
  'abcdefghijklmnopqrstuvwxyz',
  'ABCDEF0123456789',
  ' "\\/\b\f\n\r\t%+=-_',
  'é€日本😀\u0000\u001f\u007f',
];

function secretOf(next: () => number): string {
  const length = 1 + Math.floor(next() * 40);
  const alphabet = [...(ALPHABETS[Math.floor(next() * ALPHABETS.length)] ?? 'a'), ...'xyz0123'];
  let out = '';
  for (let i = 0; i < length; i++) out += alphabet[Math.floor(next() * alphabet.length)] ?? 'a';
  return out;
}

function plain(machine: SecretMachine): Record<string, unknown> {
  return Object.fromEntries(
    Object.entries(machine).map(([key, value]) => [
      key,
      ArrayBuffer.isView(value) ? [...(value as Int32Array)] : value,
    ]),
  );
}

describe('the secret machine builder', () => {
  for (let seed = 1; seed <= 40; seed++) {
    it(`builds the reference machine, at once and in steps (seed ${seed})`, async () => {
      const next = seededRandom(seed);
      const secrets = Array.from({ length: 1 + Math.floor(next() * 4) }, () => secretOf(next));
      const reference = plain(referenceSecretMachine(secrets));
      expect(plain(compileSecretMachine(secrets))).toEqual(reference);
      expect(plain(await compileSecretMachineInSteps(secrets, () => Promise.resolve()))).toEqual(reference);
    });
  }

  it('builds the reference machine for a 4 KB secret and for none', async () => {
    const big = randomBytes(3072).toString('base64');
    expect(plain(compileSecretMachine([big]))).toEqual(plain(referenceSecretMachine([big])));
    expect(plain(compileSecretMachine([]))).toEqual(plain(referenceSecretMachine([])));
    expect(plain(await compileSecretMachineInSteps([], () => Promise.resolve()))).toEqual(
      plain(referenceSecretMachine([])),
    );
  });

  it('yields in steps of bounded work: a 4 KB secret pauses about once per 8,192 nodes and edges', async () => {
    const big = randomBytes(3072).toString('base64');
    let pauses = 0;
    const machine = await compileSecretMachineInSteps([big], () => {
      pauses += 1;
      return Promise.resolve();
    });
    const work = machine.nodeCount + machine.successors.length;
    // At least one pause per step of work, and not one per node.
    expect(pauses).toBeGreaterThanOrEqual(Math.floor(work / 8192));
    expect(pauses).toBeLessThan(work / 1000);
  });
});
