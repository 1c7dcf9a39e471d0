import type { PauseHistoryEntry } from '../batch-state.js';
import type { Claims } from './pairs.js';
import type { PauseSpan, ReportInput, ReportModel, TimelineMarker } from './types.js';

/** The report's timeline: its end, the markers from the journal, the pause spans. Pure. */

const ms = (iso: string): number => new Date(iso).getTime();

/** A journal field shown as a word: strings only (the journal is ours, but never print an object). */
function word(value: unknown): string {
  return typeof value === 'string' ? value : '';
}

function markersOf(journal: ReportInput['journal']): TimelineMarker[] {
  const markers: TimelineMarker[] = [];
  for (const e of journal) {
    // A check with no pinned file compared nothing: no "match" to show.
    if (e.type === 'source_check' && e['checked'] === 0) continue;
    if (e.type === 'source_check') {
      const ok = e['ok'] === true;
      markers.push({
        at: e.at,
        kind: 'source_check',
        ok,
        label: `source check (${word(e['phase'])}): ${ok ? 'match' : 'MISMATCH'}`,
      });
    } else if (e.type === 'supervisor_started') {
      markers.push({ at: e.at, kind: 'supervisor_started', label: `supervisor ${word(e['mode'])}` });
    } else if (e.type === 'supervisor_exited') {
      markers.push({ at: e.at, kind: 'supervisor_exited', label: `supervisor exited (${word(e['state'])})` });
    } else if (e.type === 'stop_requested') {
      markers.push({
        at: e.at,
        kind: 'stop_requested',
        label: e['terminate'] === true ? 'stop --terminate' : 'stop requested',
      });
    }
  }
  return markers;
}

function pauseSpans(history: readonly PauseHistoryEntry[]): PauseSpan[] {
  const spans: PauseSpan[] = [];
  let open: { from: string; reasons: string[]; job_id: string | null } | null = null;
  for (const h of history) {
    if (h.event === 'paused') {
      if (open === null) open = { from: h.at, reasons: [...h.reasons], job_id: h.job_id };
      else open.reasons.push(...h.reasons.filter((r) => !open!.reasons.includes(r)));
    } else if (open !== null) {
      spans.push({ ...open, to: h.at });
      open = null;
    }
  }
  if (open !== null) spans.push({ ...open, to: null });
  return spans;
}

/** The timeline's end in ms: the latest journal event or pair end, and now while a supervisor is alive. */
export function timelineEndMs(input: ReportInput, claims: Claims, nowMs: number): number {
  // Journal times are all toISOString() output: the latest is the greatest string, parsed once.
  let lastAt = input.createdAt;
  for (const e of input.journal) if (e.at > lastAt) lastAt = e.at;
  let lastEventMs = Number.isFinite(ms(lastAt))
    ? Math.max(ms(lastAt), ms(input.createdAt))
    : ms(input.createdAt);
  for (const i of claims.intervals) if (i.endMs > lastEventMs) lastEventMs = i.endMs;
  return input.supervisorAlive ? Math.max(nowMs, lastEventMs) : lastEventMs;
}

export function timelineOf(
  input: ReportInput,
  claims: Claims,
  pauseHistory: readonly PauseHistoryEntry[],
  endMs: number,
): ReportModel['timeline'] {
  const { secondWorker } = claims;
  const markers = markersOf(input.journal);
  if (secondWorker)
    markers.push({
      at: new Date(secondWorker.startMs).toISOString(),
      kind: 'second_worker',
      label: `second worker admitted (${secondWorker.id})`,
    });
  return {
    start: input.createdAt,
    end: new Date(endMs).toISOString(),
    slots: [...claims.slots.values()].reduce((n, s) => Math.max(n, s + 1), 1),
    pauses: pauseSpans(pauseHistory),
    markers: markers.sort((a, b) => ms(a.at) - ms(b.at)),
    second_worker_at: secondWorker ? new Date(secondWorker.startMs).toISOString() : null,
  };
}
