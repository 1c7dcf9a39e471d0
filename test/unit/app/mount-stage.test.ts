import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { guardedSource, stageFolder } from '../../../src/app/mount-stage.js';
import { MountRefusedError, type ProtectedIds } from '../../../src/app/mount-walk.js';
import { NodeFileSystem } from '../../../src/adapters/fs/node-file-system.js';
import type { MountStager, OpenedChild, OpenedFolder } from '../../../src/app/ports/mount-stager.js';
import { ProcFdMountStager } from '../../../src/adapters/mount/proc-fd-stager.js';
import type { MountMode } from '../../../src/core/mount-mode.js';

/**
 * stageFolder against a hand-written stager over an in-memory tree: what it opens, checks, makes, binds and closes.
 * Node ids are `1:<n>`; a node is a folder (with an owner) or a link.
 */
interface Dir {
  kind: 'dir';
  id: number;
  uid: number;
  children: Map<string, Node>;
}
type Node = Dir | { kind: 'link' };

/** The staged walk never asks the file system (the stager opens everything). */
const unused = new NodeFileSystem();
let nextId = 1;
function dir(uid = 0, children: Record<string, Node> = {}): Dir {
  return { kind: 'dir', id: nextId++, uid, children: new Map(Object.entries(children)) };
}

class TreeStager implements MountStager {
  readonly open = new Map<number, Dir>();
  readonly bound: string[] = [];
  readonly made: string[] = [];
  #handles = 100;
  constructor(private readonly root: Dir) {}
  mode(): Promise<MountMode> {
    return Promise.resolve('staged');
  }
  #opened(node: Dir): OpenedFolder {
    const handle = this.#handles++;
    this.open.set(handle, node);
    const info = {
      kind: 'directory' as const,
      sizeBytes: 0,
      permissions: 0o755,
      uid: node.uid,
      fileId: `1:${node.id}`,
    };
    return { handle, info };
  }
  openRoot(): Promise<OpenedFolder> {
    return Promise.resolve(this.#opened(this.root));
  }
  openChild(parent: OpenedFolder, name: string): Promise<OpenedChild> {
    const child = this.open.get(parent.handle)?.children.get(name);
    if (child === undefined) return Promise.resolve({ kind: 'missing' });
    if (child.kind === 'link') return Promise.resolve({ kind: 'symlink' });
    return Promise.resolve({ kind: 'opened', folder: this.#opened(child) });
  }
  makeChild(parent: OpenedFolder, name: string): Promise<void> {
    this.made.push(name);
    this.open.get(parent.handle)?.children.set(name, dir());
    return Promise.resolve();
  }
  close(folder: OpenedFolder): Promise<void> {
    this.open.delete(folder.handle);
    return Promise.resolve();
  }
  bind(folder: OpenedFolder): Promise<string> {
    const node = this.open.get(folder.handle);
    this.bound.push(`1:${node?.kind === 'dir' ? node.id : '?'}`);
    return Promise.resolve(`/staged/${this.bound.length}`);
  }
  settled(): void {}
  release(): Promise<void> {
    return Promise.resolve();
  }
  sweep(): Promise<string[]> {
    return Promise.resolve([]);
  }
}

async function refused(promise: Promise<unknown>): Promise<MountRefusedError> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(MountRefusedError);
  return err as MountRefusedError;
}

describe('stageFolder: the staged walk through a stager', () => {
  it('binds the folder it opened last, closes every folder it opened, and makes missing ones inside the parent', async () => {
    const ws = dir(0, { sub: dir() });
    const stager = new TreeStager(dir(0, { ws }));
    const source = await stageFolder(stager, '/ws//sub/', 'cwd', { create: false, readOnly: true });
    expect(source).toMatchObject({
      engineSource: '/staged/1',
      stagedPath: '/staged/1',
      checked: { path: '/ws/sub' },
    });
    expect(stager.bound).toEqual([source.checked.fileId]);
    expect(source.checked.componentIds).toHaveLength(3);
    const made = await stageFolder(stager, '/ws/new/deeper', 'cwd', { create: true, readOnly: false });
    expect(stager.made).toEqual(['new', 'deeper']);
    expect(made.checked.path).toBe('/ws/new/deeper');
    expect(stager.open.size).toBe(0);
  });

  it('refuses a link, a missing folder, an owner, an alias, "..", naming the field; binds nothing, closes all', async () => {
    const stager = new TreeStager(
      dir(0, { ws: dir(0, { l: { kind: 'link' }, theirs: dir(1000, { x: dir(1000) }) }) }),
    );
    const cases: [string, Parameters<typeof stageFolder>[3], RegExp][] = [
      ['/ws/l/x', { create: true, readOnly: false }, /\/ws\/l is a symbolic link/],
      ['/ws/none', { create: false, readOnly: false }, /\/ws\/none does not exist/],
      ['/ws/theirs/x', { create: false, readOnly: false, owners: [0] }, /\/ws\/theirs is owned by user 1000/],
      ['/ws/../etc', { create: false, readOnly: false }, /holds a "\.\." component/],
    ];
    for (const [path, options, rule] of cases) {
      const err = await refused(stageFolder(stager, path, 'mounts[2].source', options));
      expect(err.field).toBe('mounts[2].source');
      expect(err.rule).toMatch(rule);
    }
    expect(stager.open.size).toBe(0);
    // A protected folder under another name: refused on the way down (inside) or at the end (be).
    const ids: ProtectedIds = { inside: new Map([['1:999', '/etc']]), be: new Map() };
    const aliasStager = new TreeStager(dir(0, { a: { kind: 'dir', id: 999, uid: 0, children: new Map() } }));
    const alias = await refused(
      guardedSource({ fs: unused, stager: aliasStager }, 'staged', '/a', 'cwd', {
        create: false,
        readOnly: false,
        ids,
      }),
    );
    expect(alias.rule).toMatch(/\/a is \/etc under another name/);
    const rootAlias = new TreeStager(dir(0, { r: { kind: 'dir', id: 998, uid: 0, children: new Map() } }));
    const be = await refused(
      guardedSource({ fs: unused, stager: rootAlias }, 'staged', '/r', 'cwd', {
        create: false,
        readOnly: false,
        ids: { inside: new Map(), be: new Map([['1:998', '/']]) },
      }),
    );
    expect(be.rule).toMatch(/\/r is \/ under another name/);
    expect([...stager.bound, ...aliasStager.bound, ...rootAlias.bound]).toEqual([]);
    expect(aliasStager.open.size + rootAlias.open.size).toBe(0);
  });
});

describe('ProcFdMountStager.makeChild', () => {
  it('rejects (never throws) when the folder exists or its parent is gone, so a race is told apart on the promise', async () => {
    const base = await mkdtemp(join(tmpdir(), 'rg-makechild-'));
    try {
      await mkdir(join(base, 'x'));
      const stager = new ProcFdMountStager({
        root: join(base, 'staging'),
        referencedSources: () => Promise.resolve(new Set()),
      });
      const root = await stager.openRoot();
      let parent = root;
      for (const name of base.split('/').filter((s) => s !== '')) {
        const child = await stager.openChild(parent, name);
        await stager.close(parent);
        if (child.kind !== 'opened') throw new Error(`cannot open ${name}`);
        parent = child.folder;
      }
      let made: Promise<void> | null = null;
      expect(() => {
        made = stager.makeChild(parent, 'x', 0o755);
      }).not.toThrow();
      await expect(made).rejects.toMatchObject({ code: 'EEXIST' });
      await stager.close(parent);
    } finally {
      await rm(base, { recursive: true, force: true });
    }
  });
});
