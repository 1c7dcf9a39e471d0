/** The node name of this host in the registry: what the local executor admits pairs to. */
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';

export function localNodeName(): string {
  const name = hostname().trim();
  return name.length > 0 ? name : 'localhost';
}

/** What both registries (SQLite, PostgreSQL) take from their options, with the same defaults. */
export interface RegistryIdentityOptions {
  readonly clock?: { now(): Date };
  readonly newId?: () => string;
  /** The node admissions without one are for (default: this host's name). */
  readonly localNode?: string;
}

/** A registry's clock (ISO text), id source and node: the given ones, else the real clock, UUIDs and this host. */
export function registryIdentity(options: RegistryIdentityOptions): {
  readonly now: () => string;
  readonly newId: () => string;
  readonly localNode: string;
} {
  const clock = options.clock ?? { now: () => new Date() };
  return {
    now: () => clock.now().toISOString(),
    newId: options.newId ?? randomUUID,
    localNode: options.localNode ?? localNodeName(),
  };
}
