/**
 * Worker slots for the timeline. The journal does not name a worker, so slots are derived: pairs in start order,
 * each on the lowest slot free at its start (an interval scheduling that uses as many slots as pairs overlapped).
 * Pure.
 */
export interface Interval {
  readonly id: string;
  readonly startMs: number;
  readonly endMs: number;
}

export function assignSlots(intervals: readonly Interval[]): Map<string, number> {
  const ordered = [...intervals].sort((a, b) => a.startMs - b.startMs || a.id.localeCompare(b.id));
  const freeAt: number[] = [];
  const slots = new Map<string, number>();
  for (const i of ordered) {
    let slot = freeAt.findIndex((t) => t <= i.startMs);
    if (slot === -1) slot = freeAt.length;
    freeAt[slot] = Math.max(i.endMs, i.startMs);
    slots.set(i.id, slot);
  }
  return slots;
}
