import { describe, expect, it } from 'vitest';
import { isSameProcess, parseProcStat, type ProcessIdentity } from '../../../src/core/process-identity.js';

/** /proc/<pid>/stat of a process named `comm`, in state `state`, started at `ticks` (field 22). */
function stat(comm: string, state: string, ticks: string): string {
  const after = [state, ...Array.from({ length: 18 }, (_, i) => String(i + 1)), ticks, '0', '0'];
  return `1234 (${comm}) ${after.join(' ')}\n`;
}

describe('parseProcStat', () => {
  it('reads the state and field 22 after the last parenthesis, whatever the command name holds', () => {
    expect(parseProcStat(stat('node', 'S', '98765'))).toEqual({ state: 'S', startTicks: '98765' });
    expect(parseProcStat(stat('a) b (c', 'R', '42'))).toEqual({ state: 'R', startTicks: '42' });
  });

  it('no command name, or nothing after it: null; a short line has no start time', () => {
    expect(parseProcStat('garbage')).toBeNull();
    expect(parseProcStat('1 (x)')).toBeNull();
    expect(parseProcStat('1 (x) S 1 2')).toEqual({ state: 'S', startTicks: null });
  });
});

describe('isSameProcess', () => {
  const me: ProcessIdentity = { pid: 1234, start_ticks: '98765', boot_id: 'boot-a' };

  it('same boot, same start time, running: alive', () => {
    expect(isSameProcess(me, { bootId: 'boot-a', procStat: stat('node', 'S', '98765') })).toBe(true);
  });

  it('another boot, no such pid, a reused pid (other start time), a zombie or a dead task: not', () => {
    expect(isSameProcess(me, { bootId: 'boot-b', procStat: stat('node', 'S', '98765') })).toBe(false);
    expect(isSameProcess(me, { bootId: 'boot-a', procStat: null })).toBe(false);
    expect(isSameProcess(me, { bootId: 'boot-a', procStat: stat('node', 'S', '11111') })).toBe(false);
    expect(isSameProcess(me, { bootId: 'boot-a', procStat: stat('node', 'Z', '98765') })).toBe(false);
    expect(isSameProcess(me, { bootId: 'boot-a', procStat: stat('node', 'X', '98765') })).toBe(false);
  });

  it('a record without a boot id is judged on the start time alone; one without a start time never matches', () => {
    expect(
      isSameProcess({ ...me, boot_id: null }, { bootId: 'boot-z', procStat: stat('node', 'S', '98765') }),
    ).toBe(true);
    expect(
      isSameProcess({ ...me, start_ticks: null }, { bootId: 'boot-a', procStat: stat('node', 'S', '98765') }),
    ).toBe(false);
  });
});
