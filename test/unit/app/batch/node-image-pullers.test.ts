import { describe, expect, it } from 'vitest';
import type { PulledImage } from '../../../../src/app/batch/batch-images.js';
import { ImagePuller } from '../../../../src/app/batch/image-puller.js';
import { NodeImagePullers } from '../../../../src/app/batch/node-image-pullers.js';
import type { ImagePulls, RegistryAuth } from '../../../../src/app/ports/image-pulls.js';
import type { ImagePlanRecord } from '../../../../src/core/image-plan.js';
import type { JournalFieldsOf } from '../../../../src/core/journal-events.js';
import type { Job } from '../../../../src/core/manifest/schema.js';
import type { PairOutcome } from '../../../../src/core/supervisor-machine.js';
import { clockAt } from '../../../support/fake-time.js';

/**
 * Issue 43 on a swarm, with a fake engine per node: each node pulls the images of the pending pairs its placement
 * allows, within its own budget; a pair waits until some node holds its image and is admitted only to those; a pull
 * failed on every node fails the pair (image_pull_failed), an outage pauses the batch.
 */
const MB = 1024 * 1024;
const HOST = '10.0.0.1:5000';
const digest = (i: number): string => `sha256:${String(i).padStart(64, '0')}`;
const image = (i: number): string => `${HOST}/img-${i}:1`;
const ref = (i: number): string => `${HOST}/img-${i}@${digest(i)}`;

class NodeEngine implements ImagePulls {
  readonly store = new Map<string, number>();
  readonly pulled: string[] = [];
  readonly auths: (RegistryAuth | undefined)[] = [];
  peak = 0;
  fail: string | null = null;
  distribution(): Promise<{ digest: string }> {
    return Promise.reject(new Error('not at supervision'));
  }
  async pull(r: string, auth: RegistryAuth | undefined): Promise<void> {
    this.auths.push(auth);
    await new Promise((done) => setTimeout(done, 2));
    if (this.fail !== null) throw new Error(this.fail);
    this.store.set(r, 10 * MB);
    this.pulled.push(r);
    this.peak = Math.max(
      this.peak,
      [...this.store.values()].reduce((a, b) => a + b, 0),
    );
  }
  facts(r: string): Promise<{ id: string; bytes: number } | null> {
    const bytes = this.store.get(r);
    return Promise.resolve(bytes === undefined ? null : { id: r, bytes });
  }
  remove(r: string): Promise<'removed' | 'absent'> {
    return Promise.resolve(this.store.delete(r) ? 'removed' : 'absent');
  }
}

function setup(jobs: readonly (readonly [string, number, string | null])[], count: number) {
  const images: ImagePlanRecord['images'] = Object.fromEntries(
    Array.from({ length: count }, (_, i) => [
      image(i),
      { digest: digest(i), ref: ref(i), compressed_bytes: 5 * MB },
    ]),
  );
  const plan: ImagePlanRecord = {
    images,
    budget_bytes: 25 * MB,
    budget_basis: 'test',
    concurrency: 1,
    nodes: ['n1', 'n2'],
  };
  const manifestJobs: Job[] = jobs.map(([id, i, node]) => ({
    job_id: id,
    image: image(i),
    argv: ['/run'],
    cwd: '/w',
    outcome_path: `/w/${id}.json`,
    ...(node !== null ? { placement: [`node.hostname==${node}`] } : {}),
  })) as Job[];
  const engines = new Map([
    ['n1', new NodeEngine()],
    ['n2', new NodeEngine()],
  ]);
  const journal: JournalFieldsOf<'image'>[] = [];
  const claimed = new Set<string>();
  const password = 'pw-node-pulls-123';
  const pullers = new NodeImagePullers({
    plan,
    nodes: ['n1', 'n2'],
    make: (node, queue) =>
      new ImagePuller({
        pulls: engines.get(node)!,
        plan,
        credentials: {
          byHost: new Map([[HOST, { username: 'u', password, serveraddress: HOST }]]),
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
          sleep: (ms: number, signal?: AbortSignal) =>
            new Promise<void>((r) => {
              const t = setTimeout(r, Math.min(ms, 5));
              signal?.addEventListener('abort', () => {
                clearTimeout(t);
                r();
              });
            }),
        },
        redact: (t) => t,
        queue,
        node,
        attempts: 2,
        backoffMs: 1,
      }),
    pending: () => manifestJobs.filter((j) => !claimed.has(j.job_id)),
    imageOf: (j) => j.image!,
    eligible: (constraints) =>
      Promise.resolve(
        constraints.length === 0 ? ['n1', 'n2'] : [constraints[0]!.slice('node.hostname=='.length)],
      ),
    journal: (type, fields) => {
      if (type === 'image') journal.push(fields);
      return Promise.resolve();
    },
    clock: clockAt(() => new Date()),
  });
  /** Each job in turn: its wait, then what it was run with. */
  const drain = async (): Promise<(PulledImage | PairOutcome)[]> => {
    await pullers.start();
    const given: (PulledImage | PairOutcome)[] = [];
    for (const job of manifestJobs) {
      claimed.add(job.job_id);
      const outcome = await pullers.whenPulled(job, job.image!, (pulled) => {
        given.push(pulled);
        return Promise.resolve({
          kind: 'finished',
          classification: 'completed',
          pauseReasons: [],
        } as PairOutcome);
      });
      if (outcome.kind !== 'finished') given.push(outcome);
    }
    return given;
  };
  return { pullers, engines, journal, drain, password };
}

describe('NodeImagePullers (issue 43, swarm)', () => {
  it('a pinned pair pulls on its node only, an unpinned one on every node; each pair is admitted only where its image is', async () => {
    const s = setup(
      [
        ['a', 0, 'n1'],
        ['b', 1, 'n2'],
        ['c', 2, null],
      ],
      3,
    );
    const given = await s.drain();
    expect(given[0]).toEqual({ nodes: ['n1'] });
    expect(given[1]).toEqual({ nodes: ['n2'] });
    expect((given[2] as PulledImage).nodes?.length).toBeGreaterThan(0);
    // A pull under way when its pair went (it ran on the node that held it first) ends all the same.
    await s.pullers.close();
    const n1 = s.engines.get('n1')!;
    const n2 = s.engines.get('n2')!;
    expect(n1.pulled).toContain(ref(0));
    expect(n1.pulled).not.toContain(ref(1));
    expect(n2.pulled).toContain(ref(1));
    expect(n2.pulled).not.toContain(ref(0));
    expect(n1.pulled).toContain(ref(2));
    expect(n2.pulled).toContain(ref(2));
    // Each node's pull carried the registry's credentials (the engine's X-Registry-Auth), nothing else did.
    for (const e of [n1, n2]) for (const auth of e.auths) expect(auth?.password).toBe(s.password);
    // Every journal record of a pull names its node; the snapshot says which node holds what.
    for (const e of s.journal.filter((r) => r.action === 'pulled')) expect(['n1', 'n2']).toContain(e.node);
    const snap = s.pullers.snapshot();
    expect(Object.keys(snap.nodes ?? {})).toEqual(['n1', 'n2']);
    expect([...(snap.nodes?.['n1']?.held ?? [])].sort()).toEqual([image(0), image(2)]);
    expect([...(snap.nodes?.['n2']?.held ?? [])].sort()).toEqual([image(1), image(2)]);
  });

  it('each node stays within its own budget, evicting what its own pending pairs no longer need', async () => {
    // Five images for n1 of 10 MiB each, a budget of 25 MiB per node: n2 never pulls any.
    const s = setup(
      Array.from({ length: 5 }, (_, i) => [`j${i}`, i, 'n1'] as const),
      5,
    );
    await s.drain();
    expect(s.engines.get('n1')!.pulled).toHaveLength(5);
    expect(s.engines.get('n1')!.peak).toBeLessThanOrEqual(25 * MB);
    expect(s.engines.get('n2')!.pulled).toEqual([]);
    expect(s.journal.filter((e) => e.action === 'evicted' && e.node === 'n1').length).toBeGreaterThan(0);
    await s.pullers.close();
  });

  it('a pull refused on every node fails the pair (image_pull_failed); an outage on a node pauses the batch', async () => {
    const refused = setup([['a', 0, null]], 1);
    refused.engines.get('n1')!.fail = 'manifest unknown';
    refused.engines.get('n2')!.fail = 'manifest unknown';
    expect(await refused.drain()).toEqual([{ pullFailure: 'manifest unknown' }]);
    expect(refused.journal.filter((e) => e.action === 'pull_failed').map((e) => [e.node, e.kind])).toEqual([
      ['n1', 'failed'],
      ['n2', 'failed'],
    ]);
    await refused.pullers.close();

    const outage = setup([['a', 0, null]], 1);
    outage.engines.get('n1')!.fail = 'dial tcp 10.0.0.1:5000: connect: connection refused';
    outage.engines.get('n2')!.fail = 'manifest unknown';
    const [answer] = await outage.drain();
    expect(answer).toMatchObject({ kind: 'failed', cause: { code: 'E_IMAGE_REGISTRY_UNAVAILABLE' } });
    await outage.pullers.close();

    // One node refuses, the other holds it: the pair runs there.
    const one = setup([['a', 0, null]], 1);
    one.engines.get('n1')!.fail = 'manifest unknown';
    expect(await one.drain()).toEqual([{ nodes: ['n2'] }]);
    await one.pullers.close();
  });
});
