import { describe, expect, it } from 'vitest';
import {
  chooseEvictions,
  classifyPullFailure,
  digestRef,
  registryHostOf,
  repositoryOf,
  type HeldImage,
} from '../../../src/core/image-plan.js';

const D = `sha256:${'a'.repeat(64)}`;

function held(ref: string, bytes: number, over: Partial<HeldImage> = {}): HeldImage {
  return { ref, bytes, lastUsedMs: 0, nextUse: null, inUse: false, ownedByUser: false, ...over };
}

describe('image references (issue 43)', () => {
  it('names the registry host as the engine reads it', () => {
    expect(registryHostOf('127.0.0.1:5000/a/b:1')).toBe('127.0.0.1:5000');
    expect(registryHostOf('localhost/x')).toBe('localhost');
    expect(registryHostOf('reg.example/x:1')).toBe('reg.example');
    expect(registryHostOf('library/ubuntu:22.04')).toBe('docker.io');
    expect(registryHostOf('ubuntu')).toBe('docker.io');
  });
  it('runs by repository@digest, whatever the tag or digest given', () => {
    expect(repositoryOf('127.0.0.1:5000/a/b:1')).toBe('127.0.0.1:5000/a/b');
    expect(repositoryOf(`h:5/a@${D}`)).toBe('h:5/a');
    expect(digestRef('h:5/a:latest', D)).toBe(`h:5/a@${D}`);
    expect(digestRef('ubuntu', D)).toBe(`ubuntu@${D}`);
  });
});

describe('a failed pull, classified', () => {
  it('an unreachable or failing registry is an outage; a refusal is the pairs’ failure', () => {
    expect(
      classifyPullFailure(
        'Get "http://127.0.0.1:5943/v2/": dial tcp 127.0.0.1:5943: connect: connection refused',
      ),
    ).toBe('unavailable');
    expect(classifyPullFailure('received unexpected HTTP status: 503 Service Unavailable')).toBe(
      'unavailable',
    );
    expect(classifyPullFailure('net/http: TLS handshake timeout')).toBe('unavailable');
    expect(classifyPullFailure('manifest for h/x@sha256:1 not found: manifest unknown')).toBe('failed');
    expect(classifyPullFailure('unauthorized: authentication required')).toBe('failed');
    expect(classifyPullFailure('write /var/lib/docker/tmp/x: no space left on device')).toBe('failed');
  });
});

describe('making room within the budget', () => {
  it('nothing goes while the next pull fits', () => {
    expect(chooseEvictions([held('a', 50)], 50, 40, 100, { forHead: false, pruneOwn: false })).toEqual([]);
  });
  it('an image larger than the whole budget: for the head, every removable image goes (it is pulled alone)', () => {
    const images = [held('a', 10, { lastUsedMs: 2 }), held('b', 20, { nextUse: 3 })];
    expect(
      chooseEvictions(images, 30, 150, 100, { forHead: true, pruneOwn: false })?.map((h) => h.ref),
    ).toEqual(['a', 'b']);
    expect(chooseEvictions(images, 30, 150, 100, { forHead: false, pruneOwn: false })).toBeNull();
    // one still running: it cannot go, so the head waits for that pair
    expect(
      chooseEvictions([held('a', 10), held('r', 5, { inUse: true })], 15, 150, 100, {
        forHead: true,
        pruneOwn: false,
      }),
    ).toBeNull();
  });
  it('removes images no pending pair needs, least recently used first', () => {
    const images = [
      held('a', 30, { lastUsedMs: 5 }),
      held('b', 30, { lastUsedMs: 1 }),
      held('c', 30, { lastUsedMs: 3 }),
    ];
    const out = chooseEvictions(images, 90, 40, 100, { forHead: false, pruneOwn: false });
    expect(out?.map((h) => h.ref)).toEqual(['b']);
  });
  it('never one a running pair uses, never the user’s own (unless pruning), never a needed one unless for the head', () => {
    const images = [
      held('running', 50, { inUse: true }),
      held('own', 50, { ownedByUser: true }),
      held('later', 50, { nextUse: 9 }),
    ];
    expect(chooseEvictions(images, 150, 40, 150, { forHead: false, pruneOwn: false })).toBeNull();
    expect(
      chooseEvictions(images, 150, 40, 150, { forHead: false, pruneOwn: true })?.map((h) => h.ref),
    ).toEqual(['own']);
    expect(
      chooseEvictions(images, 150, 40, 150, { forHead: true, pruneOwn: false })?.map((h) => h.ref),
    ).toEqual(['later']);
  });
  it('the user’s own image a pending pair needs never goes, even for the head with pruning (it cannot be pulled back)', () => {
    const images = [
      held('own-needed', 50, { ownedByUser: true, nextUse: 4 }),
      held('later', 50, { nextUse: 2 }),
    ];
    expect(
      chooseEvictions(images, 100, 50, 100, { forHead: true, pruneOwn: true })?.map((h) => h.ref),
    ).toEqual(['later']);
    expect(chooseEvictions([images[0]!], 50, 60, 100, { forHead: true, pruneOwn: true })).toBeNull();
  });
  it('for the head: the image needed last goes first', () => {
    const images = [held('soon', 50, { nextUse: 2 }), held('late', 50, { nextUse: 7 })];
    expect(
      chooseEvictions(images, 100, 50, 100, { forHead: true, pruneOwn: false })?.map((h) => h.ref),
    ).toEqual(['late']);
  });
});
