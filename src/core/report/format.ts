/** Small, pure formatting helpers shared by the report's HTML and SVG. */

const ESCAPES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
};

/** Text and attribute values: every character with a meaning in HTML is escaped. */
export function esc(value: unknown): string {
  return String(value).replace(/[&<>"']/g, (c) => ESCAPES[c]!);
}

/** 12.3 s · 4m 05s · 2h 03m · 3d 04h */
export function formatDuration(seconds: number | null): string {
  if (seconds === null || !Number.isFinite(seconds)) return '–';
  if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 1 : 0)} s`;
  const s = Math.round(seconds);
  const pad = (n: number): string => String(n).padStart(2, '0');
  if (s < 3600) return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h ${pad(Math.floor((s % 3600) / 60))}m`;
  return `${Math.floor(s / 86_400)}d ${pad(Math.floor((s % 86_400) / 3600))}h`;
}

/** 2026-12-02 21:40:05Z */
export function formatTime(iso: string | null): string {
  if (iso === null) return '–';
  return iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

/** Round to one decimal, dropping a trailing .0. */
export function num(n: number): string {
  return String(Math.round(n * 10) / 10);
}
