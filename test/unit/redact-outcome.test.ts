import { describe, expect, it } from 'vitest';
import { redactOutcome } from '../../src/core/redaction/redact-text.js';
import { outcomeForResult } from '../../src/app/pair/build-result.js';
import { checkOutcome } from '../../src/core/outcome.js';
import { redactJson } from '../../src/core/redaction/redact-json.js';

const SECRET = 'sk-live-Q7vJx2mB9kLp4RtY';

describe('redactOutcome: the parsed outcome as result.json keeps it', () => {
  it('masks values, keys and numbers holding a secret in any form, counts them, keeps the rest verbatim', () => {
    const raw = {
      job_id: 'p1',
      infrastructure_failure: false,
      fatal_failure: false,
      arms: { a: SECRET, b: true, [SECRET]: [1, `key=${Buffer.from(SECRET).toString('hex')}`], c: 'pass' },
      resource_usage: { peak_job_gpu_mib: 1234 },
    };
    const { outcome, redactions } = redactOutcome(raw, [SECRET]);
    expect(outcome).toEqual({
      job_id: 'p1',
      infrastructure_failure: false,
      fatal_failure: false,
      arms: { a: '[REDACTED]', b: true, '[REDACTED]': [1, 'key=[REDACTED]'], c: 'pass' },
      resource_usage: { peak_job_gpu_mib: 1234 },
    });
    expect(redactions).toBe(3);
    expect(JSON.stringify(outcome)).not.toContain('Q7vJx2mB');
  });

  it('masks a number whose digits are the secret', () => {
    expect(redactOutcome({ pin: 12345678, other: 7 }, ['12345678'])).toEqual({
      outcome: { pin: '[REDACTED]', other: 7 },
      redactions: 1,
    });
  });

  it('keeps two keys that mask alike apart and a __proto__ key as an own property', () => {
    const raw = JSON.parse(`{"${SECRET}":1,"x${SECRET}":2,"__proto__":{"k":"${SECRET}"}}`) as unknown;
    const { value, redactions } = redactJson(raw, (t) => t.replaceAll(SECRET, '[REDACTED]'));
    expect(JSON.stringify(value)).toBe('{"[REDACTED]":1,"x[REDACTED]":2,"__proto__":{"k":"[REDACTED]"}}');
    expect(redactions).toBe(3);
    expect(
      JSON.stringify(
        redactJson({ [SECRET]: 1, [`${SECRET} `]: 2 }, (t) => (t.startsWith(SECRET) ? 'same' : t)).value,
      ),
    ).toBe('{"same":1,"same#2":2}');
  });

  it('outcomeForResult: masked value and count from the check; null and 0 when absent or unparseable', () => {
    const bytes = new TextEncoder().encode(
      JSON.stringify({
        job_id: 'p',
        infrastructure_failure: false,
        fatal_failure: false,
        arms: { k: SECRET },
      }),
    );
    const check = checkOutcome({ state: 'present', bytes });
    expect(check.kind).toBe('valid');
    expect(outcomeForResult(check, [SECRET])).toEqual({
      value: { job_id: 'p', infrastructure_failure: false, fatal_failure: false, arms: { k: '[REDACTED]' } },
      redactions: 1,
    });
    // An invalid outcome is kept too (for diagnosis), masked the same way.
    const invalid = checkOutcome({
      state: 'present',
      bytes: new TextEncoder().encode(JSON.stringify({ arms: SECRET })),
    });
    expect(outcomeForResult(invalid, [SECRET])).toEqual({ value: { arms: '[REDACTED]' }, redactions: 1 });
    expect(outcomeForResult(checkOutcome({ state: 'missing' }), [SECRET])).toEqual({
      value: null,
      redactions: 0,
    });
    expect(
      outcomeForResult(checkOutcome({ state: 'present', bytes: new TextEncoder().encode('{') }), [SECRET]),
    ).toEqual({ value: null, redactions: 0 });
  });
});
