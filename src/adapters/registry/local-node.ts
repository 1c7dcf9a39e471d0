/** The node name of this host in the registry: what the local executor admits pairs to. */
import { hostname } from 'node:os';

export function localNodeName(): string {
  const name = hostname().trim();
  return name.length > 0 ? name : 'localhost';
}
