import { SECRET_MASK } from './secret-stage.js';

export interface RedactedJson {
  readonly value: unknown;
  /** Strings, keys and numbers that had to be masked. */
  readonly redactions: number;
}

/**
 * Masks secrets inside a parsed JSON value, one string at a time (keys included; a number whose
 * decimal text holds a secret becomes the mask). The structure stays valid JSON whatever the mask
 * covers. A secret split across two strings is not seen (documented in docs/secrets.md). Pure.
 */
export function redactJson(value: unknown, redact: (text: string) => string): RedactedJson {
  let redactions = 0;
  const text = (s: string): string => {
    const out = redact(s);
    if (out !== s) redactions++;
    return out;
  };
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') return text(v);
    if (typeof v === 'number') {
      const shown = String(v);
      return text(shown) === shown ? v : SECRET_MASK;
    }
    if (Array.isArray(v)) return v.map(walk);
    if (typeof v === 'object' && v !== null) {
      const out: Record<string, unknown> = {};
      for (const [key, inner] of Object.entries(v)) {
        const masked = text(key);
        let name = masked;
        // Two keys masked alike must not overwrite each other.
        for (let n = 2; Object.hasOwn(out, name); n++) name = `${masked}#${n}`;
        // defineProperty: a `__proto__` key stays an own property, as JSON.parse made it.
        Object.defineProperty(out, name, {
          value: walk(inner),
          enumerable: true,
          writable: true,
          configurable: true,
        });
      }
      return out;
    }
    return v;
  };
  const redacted = walk(value);
  return { value: redacted, redactions };
}
