import { describe, expect, it } from 'vitest';
import { redactText } from '../../src/core/redaction/redact-text.js';

const secret = 'ELWaldUv27wuMy4QFIk+VisEwojCdD/KTTwBdayv';

describe('secret encodings beyond the canonical ones', () => {
  it('masks URL encoding with lower-case hex digits (RFC 3986: case-insensitive)', () => {
    const lower = encodeURIComponent(secret).replace(/%[0-9A-F]{2}/g, (m) => m.toLowerCase());
    expect(lower).toContain('%2b');
    expect(redactText(`url-lower: ${lower}`, [secret])).not.toContain('VisEwojC');
  });

  it('masks JSON that escapes "/" as "\\/" (PHP json_encode and others)', () => {
    const escaped = JSON.stringify({ k: secret }).replace(/\//g, '\\/');
    expect(escaped).toContain('\\/');
    expect(redactText(escaped, [secret])).not.toContain('KTTwBday');
  });
});
