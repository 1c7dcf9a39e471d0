import { describe, expect, it } from 'vitest';
import { ImagePuller } from '../../../../src/app/batch/image-puller.js';
import type { ImagePulls, RegistryAuth } from '../../../../src/app/ports/image-pulls.js';
import type { ImagePlanRecord } from '../../../../src/core/image-plan.js';
import type { JournalFieldsOf } from '../../../../src/core/journal-events.js';
import { clockAt } from '../../../support/fake-time.js';

const MB = 1024 * 1024;
const digest = (i: number): string => `sha256:${String(i).padStart(64, '0')}`;

/** An engine with a registry behind it: pulls take a few ticks; the store's bytes are tracked. */
class FakePulls implements ImagePulls {
  readonly store = new Map<string, number>();
  readonly pulled: string[] = [];
  readonly auths: (RegistryAuth | undefined)[] = [];
  peakStore = 0;
  active = 0;
  peakActive = 0;
  fail: ((ref: string) => string | null) | null = null;
  constructor(readonly sizes: ReadonlyMap<string, number>) {}
  distribution(): Promise<{ digest: string }> {
    return Promise.resolve({ digest: digest(0) });
  }
  async pull(ref: string, auth: RegistryAuth | undefined): Promise<void> {
    this.auths.push(auth);
    this.active += 1;
    this.peakActive = Math.max(this.peakActive, this.active);
    await new Promise((r) => setTimeout(r, 2));
    this.active -= 1;
    const message = this.fail?.(ref) ?? null;
    if (message !== null) throw new Error(message);
    this.store.set(ref, this.sizes.get(ref) ?? 0);
    this.pulled.push(ref);
    this.peakStore = Math.max(
      this.peakStore,
      [...this.store.values()].reduce((a, b) => a + b, 0),
    );
  }
  facts(ref: string): Promise<{ id: string; bytes: number } | null> {
    const bytes = this.store.get(ref);
    return Promise.resolve(bytes === undefined ? null : { id: ref, bytes });
  }
  /** Set: every removal waits for it (an engine slow to remove an image). */
  removeGate: Promise<void> | null = null;
  removing = 0;
  async remove(ref: string): Promise<'removed' | 'absent'> {
    this.removing += 1;
    await this.removeGate;
    this.removing -= 1;
    return this.store.delete(ref) ? 'removed' : 'absent';
  }
}

function setup(
  count: number,
  budget: number,
  opts: { concurrency?: number; prune?: boolean; own?: Record<string, string> } = {},
) {
  const images: Record<string, { digest: string; ref: string; compressed_bytes: number }> = {};
  const sizes = new Map<string, number>();
  for (let i = 0; i < count; i += 1) {
    const ref = `127.0.0.1:5943/img-${i}@${digest(i)}`;
    images[`127.0.0.1:5943/img-${i}:1`] = { digest: digest(i), ref, compressed_bytes: (20 + i) * MB };
    sizes.set(ref, (20 + i) * MB);
  }
  const plan: ImagePlanRecord = {
    images,
    budget_bytes: budget,
    budget_basis: 'test',
    concurrency: opts.concurrency ?? 2,
    ...(opts.prune === true ? { prune_own_images: true } : {}),
  };
  const pulls = new FakePulls(sizes);
  const journal: JournalFieldsOf<'image'>[] = [];
  const queue: string[] = [];
  const password = 'hunter2-password-xyz';
  const puller = new ImagePuller({
    pulls,
    plan,
    credentials: {
      byHost: new Map([['127.0.0.1:5943', { username: 'u', password, serveraddress: '127.0.0.1:5943' }]]),
      secrets: [password],
    },
    journal: (type, fields) => {
      if (type === 'image') journal.push(fields);
      return Promise.resolve();
    },
    logger: {
      info: () => undefined,
      warn: () => undefined,
      error: () => undefined,
      debug: () => undefined,
    } as never,
    clock: {
      ...clockAt(() => new Date()),
      sleep: (ms, signal) =>
        new Promise((r) => {
          const t = setTimeout(r, Math.min(ms, 5));
          signal?.addEventListener('abort', () => {
            clearTimeout(t);
            r(undefined);
          });
        }),
    },
    redact: (t) => t.replaceAll(password, '***'),
    queue: () => queue,
    attempts: 3,
    backoffMs: 1,
    ...(opts.own !== undefined ? { ownImages: opts.own } : {}),
  });
  return { puller, pulls, journal, queue, images: Object.keys(images), password };
}

/** Runs jobs (their images) in order, one at a time, as the supervisor does. */
async function drain(s: ReturnType<typeof setup>, jobs: string[]): Promise<string[]> {
  s.queue.push(...jobs);
  await s.puller.start();
  const kinds: string[] = [];
  for (const [i, image] of jobs.entries()) {
    s.queue.shift();
    const ready = await s.puller.ready(image, `job-${i}`);
    kinds.push(ready.kind);
    if (ready.kind === 'ready') s.puller.release(image);
  }
  await s.puller.close();
  return kinds;
}

describe('ImagePuller (issue 43)', () => {
  it('pulls ahead in dispatch order, at most `concurrency` at once, never above the budget, each image once', async () => {
    const s = setup(8, 80 * MB);
    const jobs = s.images.flatMap((image) => [image, image, image]);
    expect(await drain(s, jobs)).toEqual(Array(24).fill('ready'));
    expect(s.pulls.peakActive).toBeLessThanOrEqual(2);
    expect(s.pulls.peakStore).toBeLessThanOrEqual(80 * MB);
    expect(s.pulls.pulled).toHaveLength(8);
    expect(s.pulls.pulled).toEqual(s.images.map((i) => s.journal.find((e) => e.image === i)?.ref));
    expect(s.journal.filter((e) => e.action === 'evicted').length).toBeGreaterThan(0);
  });

  it('interleaved images: the pair whose turn it is gets room (an image needed later goes and is pulled again)', async () => {
    const s = setup(4, 50 * MB);
    const jobs = [0, 1, 2, 3, 0, 1, 2, 3].map((i) => s.images[i] ?? '');
    expect(await drain(s, jobs)).toEqual(Array(8).fill('ready'));
    expect(s.pulls.peakStore).toBeLessThanOrEqual(50 * MB);
    for (const ref of new Set(s.pulls.pulled)) {
      const pulls = s.pulls.pulled.filter((r) => r === ref).length;
      const evictions = s.journal.filter((e) => e.action === 'evicted' && e.ref === ref).length;
      expect(pulls).toBeLessThanOrEqual(1 + evictions);
    }
  });

  it('a registry that refuses: retried, then the pairs get the masked message; an outage is `unavailable`', async () => {
    const s = setup(2, 500 * MB);
    s.pulls.fail = (ref) =>
      ref.includes('img-0')
        ? `manifest unknown (user u, ${s.password})`
        : 'dial tcp 127.0.0.1:5943: connect: connection refused';
    const kinds = await drain(s, [s.images[0] ?? '', s.images[1] ?? '']);
    expect(kinds).toEqual(['failed', 'unavailable']);
    expect(s.journal.filter((e) => e.action === 'pull_retry' && e.image === s.images[0])).toHaveLength(2);
    const failed = s.journal.filter((e) => e.action === 'pull_failed');
    expect(failed.map((e) => e.kind)).toEqual(['failed', 'unavailable']);
    expect(JSON.stringify(s.journal)).not.toContain(s.password);
    expect(s.pulls.auths.every((a) => a?.password === s.password)).toBe(true);
  });

  it('an image being removed is never handed to a pair: its pair waits for the pull that brings it back', async () => {
    // Found on a swarm under load (swarm-image-pulls.int): a node's puller chose an image to evict, and while the
    // engine removed it a pair's turn came, found it still held and was sent there: "No such image".
    const s = setup(2, 25 * MB);
    const [first, second] = [s.images[0] ?? '', s.images[1] ?? ''];
    const ref0 = `127.0.0.1:5943/img-0@${digest(0)}`;
    s.pulls.store.set(ref0, 20 * MB); // held from a previous supervisor: start() finds it
    let openGate = (): void => undefined;
    s.pulls.removeGate = new Promise((r) => (openGate = r));
    s.queue.push(second); // the pending pairs need img-1 only: img-0 is the one to evict for it
    await s.puller.start();
    for (let i = 0; i < 100 && s.pulls.removing === 0; i += 1) await new Promise((r) => setTimeout(r, 1));
    expect(s.pulls.removing).toBe(1); // img-0's removal is under way
    let handedOver: { removing: number; inStore: boolean } | null = null;
    const turn = s.puller.ready(first, 'job-late').then((r) => {
      handedOver = { removing: s.pulls.removing, inStore: s.pulls.store.has(ref0) };
      return r;
    });
    await new Promise((r) => setTimeout(r, 10));
    s.pulls.removeGate = null;
    openGate();
    s.queue.shift();
    expect((await turn).kind).toBe('ready');
    // Handed over once the removal was over and img-0 was there again (pulled back), never during it.
    expect(handedOver).toEqual({ removing: 0, inStore: true });
    expect(s.journal.filter((e) => e.action === 'evicted' && e.ref === ref0)).toHaveLength(1);
    expect(s.pulls.pulled.filter((r) => r === ref0)).toHaveLength(1);
    s.puller.release(first);
    await s.puller.close();
  });

  it('--prune-own-images: a pair whose own image is being removed is told it is gone, not handed it', async () => {
    const s = setup(1, 45 * MB, { prune: true, own: { 'mine:1': 'sha256:own' } });
    s.pulls.store.set('sha256:own', 30 * MB);
    let openGate = (): void => undefined;
    s.pulls.removeGate = new Promise((r) => (openGate = r));
    s.queue.push(s.images[0] ?? ''); // no pending pair needs mine:1 (its pair's turn has just come)
    await s.puller.start();
    for (let i = 0; i < 100 && s.pulls.removing === 0; i += 1) await new Promise((r) => setTimeout(r, 1));
    expect(s.pulls.removing).toBe(1);
    const turn = s.puller.ready('mine:1', 'job-own');
    await new Promise((r) => setTimeout(r, 10));
    openGate();
    const answer = await turn;
    expect(answer.kind).toBe('failed');
    expect(s.pulls.store.has('sha256:own')).toBe(false);
    await s.puller.close();
  });

  it('the user’s own images stay unless --prune-own-images; with it, an unneeded one makes room', async () => {
    for (const prune of [false, true]) {
      const s = setup(2, 45 * MB, { prune, own: { 'mine:1': 'sha256:own' } });
      s.pulls.store.set('sha256:own', 30 * MB);
      const kinds = await drain(s, [s.images[0] ?? '', s.images[1] ?? '']);
      expect(kinds).toEqual(['ready', 'ready']);
      expect(s.pulls.store.has('sha256:own')).toBe(!prune);
    }
  });
});
