import { describe, expect, it } from 'vitest';
import {
  decide,
  egressInputOf,
  parseAllowEntry,
  parseEgress,
  type EgressPolicy,
} from '../../../../src/core/egress/policy.js';

function policy(allow: string[], methods?: string[]): EgressPolicy {
  const parsed = parseEgress({ mode: 'allowlist', allow, ...(methods ? { methods } : {}) });
  if (!parsed.ok) throw new Error(parsed.rule);
  return parsed.policy;
}

describe('egress policy', () => {
  it('matches exact names, strict-subdomain wildcards, ports and literals', () => {
    const p = policy([
      'api.openai.com',
      '*.anthropic.com',
      'pypi.internal:8443',
      '203.0.113.7:8080',
      '[2001:DB8::1]',
    ]);
    expect(decide(p, 'API.OpenAI.com.', 443, null)).toEqual({ allowed: true });
    expect(decide(p, 'api.openai.com', 8080, null).allowed).toBe(false);
    expect(decide(p, 'x.api.openai.com', 443, null).allowed).toBe(false);
    expect(decide(p, 'api.anthropic.com', 443, 'POST').allowed).toBe(true);
    expect(decide(p, 'a.b.anthropic.com', 80, null).allowed).toBe(true);
    expect(decide(p, 'anthropic.com', 443, null)).toEqual({ allowed: false, reason: 'host_not_allowed' });
    expect(decide(p, 'evil-anthropic.com', 443, null).allowed).toBe(false);
    expect(decide(p, 'anthropic.com.evil.net', 443, null).allowed).toBe(false);
    expect(decide(p, 'pypi.internal', 8443, null).allowed).toBe(true);
    expect(decide(p, 'pypi.internal', 443, null).allowed).toBe(false);
    expect(decide(p, '203.0.113.7', 8080, null).allowed).toBe(true);
    expect(decide(p, '203.0.113.8', 8080, null).allowed).toBe(false);
    expect(decide(p, '[2001:db8:0::1]', 443, null).allowed).toBe(true);
    // A name never matches an address rule, nor an address a name rule.
    expect(decide(policy(['203.0.113.7']), 'api.openai.com', 443, null).allowed).toBe(false);
  });

  it('applies methods only where the method is seen', () => {
    const p = policy(['api.openai.com'], ['get', 'HEAD']);
    expect(decide(p, 'api.openai.com', 443, 'GET').allowed).toBe(true);
    expect(decide(p, 'api.openai.com', 443, 'POST')).toEqual({
      allowed: false,
      reason: 'method_not_allowed',
    });
    expect(decide(p, 'api.openai.com', 443, null).allowed).toBe(true);
  });

  it('none refuses, open allows, as before', () => {
    expect(decide({ mode: 'none', allow: [], methods: null }, 'a.b', 443, null).allowed).toBe(false);
    expect(decide({ mode: 'open', allow: [], methods: null }, 'a.b', 25, 'POST').allowed).toBe(true);
  });

  it('refuses bad entries naming the rule', () => {
    for (const bad of [
      '*',
      '*.com',
      'a.*.com',
      'exa mple.com',
      'x.com:0',
      'x.com:70000',
      '[::1',
      '-a.com',
      'a..b',
    ])
      expect(parseAllowEntry(bad).ok, bad).toBe(false);
    expect(parseEgress({ mode: 'open', allow: ['a.com'] })).toEqual({
      ok: false,
      field: 'allow',
      rule: 'only with mode "allowlist"',
    });
    expect(parseEgress({ mode: 'allowlist', allow: ['a.com'], methods: ['FETCH'] })).toMatchObject({
      ok: false,
      field: 'methods[0]',
    });
    expect(parseEgress({ mode: 'allowlist', allow: ['ok.com', 'x.com:99999'] })).toMatchObject({
      ok: false,
      field: 'allow[1]',
    });
  });

  it('round-trips to the written form', () => {
    expect(egressInputOf(policy(['*.a.com', 'b.com:8443'], ['GET']))).toEqual({
      mode: 'allowlist',
      allow: ['*.a.com', 'b.com:8443'],
      methods: ['GET'],
    });
  });
});
