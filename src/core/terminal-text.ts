/**
 * Text bound for a terminal, made inert. Engine messages, image fields (an image's `USER`), outcome strings, file
 * names and job ids come from pairs and images we do not trust: a raw ESC sequence or carriage return in one can
 * erase or overwrite what we printed (`pair x completed` drawn over a failure), retitle the window or worse. The
 * commands print through one choke point (src/cli/base-command.ts: log, logToStderr, warn, errors, JSON) that
 * passes every line through these functions once, so no message needs its own escaping.
 *
 * Shown visibly as `\xHH`: every C0 control but tab and newline (so ESC, CR, BEL, backspace…), DEL, and the C1
 * controls U+0080–U+009F (a terminal may take U+009B as CSI). Shown as `\u{HHHH}`: the bidirectional overrides and
 * isolates (U+202A–U+202E, U+2066–U+2069) and the line and paragraph separators (U+2028, U+2029), which reorder
 * or break what a reader sees. Everything else is kept as it is.
 */

// eslint-disable-next-line no-control-regex -- control characters are what is escaped
const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/gu;

function visible(char: string): string {
  const code = char.codePointAt(0) ?? 0;
  return code < 0x100 ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u{${code.toString(16)}}`;
}

/** `text` with every control character (but tab and newline) and every reordering character shown escaped. */
export function terminalSafe(text: string): string {
  return text.replace(UNSAFE, visible);
}

/**
 * JSON text made inert for a terminal without changing its value: JSON.stringify already escapes C0 controls; DEL,
 * the C1 controls and the reordering characters it leaves raw become `\u00XX` escapes, which parse back to the same
 * strings. ESC sequences outside strings (a colorizer's own) are kept.
 */
export function jsonTerminalSafe(jsonText: string): string {
  return jsonText.replace(
    /[\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/gu,
    (char) => `\\u${(char.codePointAt(0) ?? 0).toString(16).padStart(4, '0')}`,
  );
}
