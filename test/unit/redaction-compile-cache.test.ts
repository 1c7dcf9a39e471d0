/**
 * A secret set is compiled once and its machine shared (issue 39: serve compiled a redactor for every exec's argv,
 * stdout and stderr and every log line, the largest CPU cost of ours in a 100-session run). Shared or not, every
 * redactor masks exactly its own set.
 */
import { describe, expect, it } from 'vitest';
import { compileRedaction } from '../../src/core/redaction/compile.js';
import { redactOnce } from '../../src/core/redaction/redact-once.js';
import { StreamRedactor } from '../../src/core/redaction/stream-redactor.js';

const A = 'alpha-secret-value-1';
const B = 'bravo-secret-value-2';

describe('compileRedaction cache', () => {
  it('compiles a secret set once: the same set (in either mode) gets the same machine', () => {
    const first = compileRedaction([A, B], 'text');
    const again = compileRedaction([A, B], 'latin1-bytes');
    expect(again.secretMachine).toBe(first.secretMachine);
    expect(again.tailChars).toBe(first.tailChars);
    expect(again.mode).toBe('latin1-bytes');
  });

  it('tells sets apart, whatever their secrets have in common', () => {
    const ab = compileRedaction([A, B], 'text');
    expect(compileRedaction([A], 'text').secretMachine).not.toBe(ab.secretMachine);
    // Length-prefixed keys: ['ab', 'c'] and ['a', 'bc'] are different sets.
    expect(compileRedaction(['xy-secret-1', 'z-secret'], 'text').secretMachine).not.toBe(
      compileRedaction(['xy-secret-', '1z-secret'], 'text').secretMachine,
    );
    expect(redactOnce(compileRedaction([A], 'text'), `${A} ${B}`)).not.toContain(A);
    expect(redactOnce(compileRedaction([A], 'text'), `${A} ${B}`)).toContain(B);
    expect(redactOnce(compileRedaction([B], 'text'), `${A} ${B}`)).toContain(A);
  });

  it('keeps the caller options of each compile', () => {
    expect(compileRedaction([A], 'text', { maxHeldChars: 100 }).maxHeldChars).toBe(100);
    expect(compileRedaction([A], 'text').maxHeldChars).toBe(64 * 1024);
  });

  it('lets two streams share one machine without sharing state', () => {
    const one = new StreamRedactor(compileRedaction([A], 'latin1-bytes'));
    const two = new StreamRedactor(compileRedaction([A], 'latin1-bytes'));
    // Each holds back its own half of the secret; interleaved pushes must not mix them.
    const out1 = one.push(`x ${A.slice(0, 9)}`);
    const out2 = two.push(`y ${A.slice(0, 4)}`);
    const end1 = one.push(`${A.slice(9)} z`) + one.end();
    const end2 = two.push(`${A.slice(4)} w`) + two.end();
    expect(out1 + end1).not.toContain(A);
    expect(out1 + end1).toMatch(/^x .* z$/);
    expect(out2 + end2).not.toContain(A);
    expect(out2 + end2).toMatch(/^y .* w$/);
  });

  it('stays bounded: a set asked for again after 40 others is compiled anew', () => {
    const first = compileRedaction(['evicted-secret-0'], 'text').secretMachine;
    for (let i = 1; i <= 40; i++) compileRedaction([`evicted-secret-${i}`], 'text');
    expect(compileRedaction(['evicted-secret-0'], 'text').secretMachine).not.toBe(first);
  });
});
