/**
 * A session's secrets change one at a time, each new set's masking compiled in steps and held before the session
 * shows it (issue 39, twelfth stop: a compile on the event loop held serve about 0.6 s for one 4 KB secret).
 */
import { describe, expect, it } from 'vitest';
import { compileRedaction, redactionCompiled } from '../../../../src/core/redaction/compile.js';
import {
  addSessionSecrets,
  holdSessionSecrets,
  releaseSessionSecrets,
} from '../../../../src/app/serve/session-secrets.js';
import { SESSION_SCHEMA, sessionOf, type Session } from '../../../../src/app/serve/session-state.js';

const clock = { nextTurn: () => new Promise<void>((resolve) => setImmediate(resolve)) };

function session(secrets: readonly string[]): Session {
  const id = 's-0123abcd-0123-4567-89ab-0123456789ab';
  return sessionOf({
    record: {
      schema: SESSION_SCHEMA,
      session_id: id,
      claim_id: 'claim-1',
      reservation_id: 'res-1',
      container_id: null,
      container_name: `roboguide-${id}`,
      image: 'img:1',
      environment: {},
      ports: [],
      network: 'none',
      labels: {},
      ttl_seconds: 600,
      created_at: '2026-12-03T10:00:00.000Z',
      expires_at: '2026-12-03T10:10:00.000Z',
    },
    secrets,
    expiresAtMs: 0,
    state: 'live',
  });
}

/** Sets asked for by nobody in particular, enough to push every unheld set out of the cache. */
function churn(tag: string): void {
  for (let i = 0; i < 40; i++) compileRedaction([`churn-${tag}-secret-${i}`], 'text');
}

describe('session secrets', () => {
  it("holds a session's set until it leaves: past any churn of other sets", async () => {
    const s = session(['first-session-secret-1']);
    await holdSessionSecrets(s, clock);
    churn('a');
    expect(redactionCompiled(s.secrets)).toBe(true);
    releaseSessionSecrets(s);
    churn('b');
    expect(redactionCompiled(['first-session-secret-1'])).toBe(false);
  });

  it('shows an added secret only once its set is compiled, and lets the old set go', async () => {
    const s = session(['second-session-secret-1']);
    await holdSessionSecrets(s, clock);
    const before = [...s.secrets];
    const adding = addSessionSecrets(s, ['second-session-secret-2'], clock);
    expect(s.secrets).toEqual(before); // not yet: its masking is still compiling
    await adding;
    expect(s.secrets).toEqual(['second-session-secret-1', 'second-session-secret-2']);
    churn('c');
    expect(redactionCompiled(s.secrets)).toBe(true);
    expect(redactionCompiled(before)).toBe(false);
    releaseSessionSecrets(s);
  });

  it('keeps both of two additions made at the same time, and judges a cap with both', async () => {
    const s = session([]);
    await holdSessionSecrets(s, clock);
    const cap = (fresh: readonly string[]) => (held: readonly string[]) =>
      held.length + fresh.length > 2 ? new Error(`over: ${held.length} held`) : null;
    const results = await Promise.allSettled([
      addSessionSecrets(s, ['third-secret-a'], clock, cap(['third-secret-a'])),
      addSessionSecrets(s, ['third-secret-b'], clock, cap(['third-secret-b'])),
      addSessionSecrets(s, ['third-secret-c'], clock, cap(['third-secret-c'])),
    ]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled', 'rejected']);
    expect(s.secrets).toEqual(['third-secret-a', 'third-secret-b']);
    // A refused addition changes nothing, and the next one runs.
    await addSessionSecrets(s, ['third-secret-a'], clock);
    expect(s.secrets).toEqual(['third-secret-a', 'third-secret-b']);
    releaseSessionSecrets(s);
  });

  it('holds nothing for an addition that ends after the session left', async () => {
    const s = session(['fourth-session-secret-1']);
    await holdSessionSecrets(s, clock);
    const late = addSessionSecrets(s, ['fourth-session-secret-2'], clock);
    releaseSessionSecrets(s);
    await late;
    churn('d');
    expect(redactionCompiled(['fourth-session-secret-1', 'fourth-session-secret-2'])).toBe(false);
    expect(s.secretsHeld.release).toBeNull();
  });
});
