/**
 * A secret set is compiled once and its machine shared (issue 39: serve compiled a redactor for every exec's argv,
 * stdout and stderr and every log line, the largest CPU cost of ours in a 100-session run). Shared or not, every
 * redactor masks exactly its own set.
 */
import { describe, expect, it } from 'vitest';
import { compileRedaction, holdRedaction, redactionCompiled } from '../../src/core/redaction/compile.js';
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

  it('keeps a held set past 40 others, and lets it go once released', async () => {
    const set = ['held-secret-value-0'];
    const release = await holdRedaction(set, () => Promise.resolve());
    const held = compileRedaction(set, 'text').secretMachine;
    for (let i = 1; i <= 40; i++) compileRedaction([`other-secret-${i}`], 'text');
    expect(compileRedaction(set, 'text').secretMachine).toBe(held);
    release();
    release(); // a second release changes nothing
    for (let i = 41; i <= 80; i++) compileRedaction([`other-secret-${i}`], 'text');
    expect(redactionCompiled(set)).toBe(false);
  });

  it('compiles a held set in steps, once for two holders at the same time, and masks it as a compile at once does', async () => {
    const secret = `${'k'.repeat(10)}${Buffer.alloc(3000, 7).toString('base64')}`;
    let pauses = 0;
    const pause = (): Promise<void> => {
      pauses += 1;
      return new Promise((resolve) => setImmediate(resolve));
    };
    expect(redactionCompiled([secret])).toBe(false);
    const [one, two] = await Promise.all([holdRedaction([secret], pause), holdRedaction([secret], pause)]);
    // About 200,000 nodes and edges in steps of 8,192: one compile's pauses, not two.
    expect(pauses).toBeGreaterThan(5);
    expect(pauses).toBeLessThan(80);
    expect(redactionCompiled([secret])).toBe(true);
    const text = `x ${secret} y ${Buffer.from(secret).toString('base64')} z`;
    expect(redactOnce(compileRedaction([secret], 'text'), text)).toBe('x [REDACTED] y [REDACTED] z');
    one();
    for (let i = 1; i <= 40; i++) compileRedaction([`again-secret-${i}`], 'text');
    expect(redactionCompiled([secret])).toBe(true); // the second holder still holds it
    two();
  });

  it("grows a stream's threads as a step needs them, and two streams of one machine keep theirs apart", () => {
    // Every position of a run of "a" keeps a thread alive in every form that spells it: hundreds a step.
    const secret = 'a'.repeat(300);
    const compiled = compileRedaction([secret], 'latin1-bytes');
    const one = new StreamRedactor(compiled);
    const two = new StreamRedactor(compiled);
    const input = `x${'a'.repeat(1000)}y`;
    let sent2 = '';
    let out1 = '';
    let out2 = '';
    for (let at = 0; at < input.length; at += 50) {
      out1 += one.push(input.slice(at, at + 50));
      // The other stream's runs of "a" are 49 long, a "b" between them: nothing of its to mask.
      const piece = `b${input.slice(at + 1, at + 50)}`;
      sent2 += piece;
      out2 += two.push(piece);
    }
    out1 += one.end();
    out2 += two.end();
    expect(out1).toBe('x[REDACTED]y');
    expect(out1).toBe(redactOnce(compiled, input));
    expect(out2).toBe(sent2);
  });

  it("a stream's own memory does not grow with its machine: 20 streams of a 16 KB set's take a few MB, not 20 × 22", () => {
    const secrets = [0, 1, 2, 3].map((i) => Buffer.alloc(3000, i + 1).toString('base64') + `-${i}`);
    const compiled = compileRedaction(secrets, 'latin1-bytes');
    expect(compiled.secretMachine.nodeCount).toBeGreaterThan(700_000);
    new StreamRedactor(compiled).push('warm'); // the machine's marks, once
    const before = process.memoryUsage().arrayBuffers;
    const streams = Array.from({ length: 20 }, () => new StreamRedactor(compiled));
    const grown = process.memoryUsage().arrayBuffers - before;
    expect(streams.map((s) => s.push('plain text') + s.end())).toEqual(Array(20).fill('plain text'));
    expect(grown).toBeLessThan(4 * 1024 * 1024);
  });

  it('runs compiles in steps one after another: two sets asked for together do not hold their builders at once', async () => {
    const order: string[] = [];
    const pauseOf = (tag: string) => (): Promise<void> => {
      order.push(tag);
      return new Promise((resolve) => setImmediate(resolve));
    };
    const [a, b] = await Promise.all([
      holdRedaction([Buffer.alloc(2000, 1).toString('base64')], pauseOf('a')),
      holdRedaction([Buffer.alloc(2000, 2).toString('base64')], pauseOf('b')),
    ]);
    const joined = order.join('');
    expect(joined).toMatch(/^a+b+$/);
    a();
    b();
  });

  it('keeps at most about a million nodes of sets nobody holds: a large set let go leaves once another comes', async () => {
    // Three secrets of 4,000 bytes: about 600,000 nodes a set.
    const large = (i: number): string[] =>
      [0, 1, 2].map((k) => Buffer.alloc(3000, 10 * i + k).toString('base64'));
    const release = await holdRedaction(large(1), () => Promise.resolve());
    release();
    expect(redactionCompiled(large(1))).toBe(true);
    compileRedaction(large(2), 'text');
    // By their nodes, not their count (2 of 32): the older one left.
    expect(redactionCompiled(large(1))).toBe(false);
    expect(redactionCompiled(large(2))).toBe(true);
    // The newest is kept whatever its size.
    const huge = [...large(3), ...large(4)];
    compileRedaction(huge, 'text');
    expect(redactionCompiled(huge)).toBe(true);
    expect(redactionCompiled(large(2))).toBe(false);
  });
});
