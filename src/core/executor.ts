import { InvalidInputError, type Issue } from './errors.js';

/**
 * Where pairs run (issue 13): the local engine, or Docker Swarm through a manager's engine, with each node's own
 * engine configured for what the manager's API cannot do (read the outcome volume and Codex sessions back, verify
 * the task container's removal). Recorded in batch.json so that `resume` uses the same executor.
 */
export type ExecutorConfig =
  | { readonly kind: 'local' }
  | {
      readonly kind: 'swarm';
      /** The swarm manager's engine endpoint. */
      readonly manager: string;
      /** Node (hostname or node id) → that node's engine endpoint. */
      readonly node_engines: Readonly<Record<string, string>>;
    };

export const LOCAL_EXECUTOR: ExecutorConfig = Object.freeze({ kind: 'local' });

/** An engine endpoint: `unix:///abs/socket`, `tcp://host:port` (TLS with `?ca=&cert=&key=` file paths) or `ssh://[user@]host[:port]`. */
export type EngineEndpoint =
  | { readonly kind: 'unix'; readonly socketPath: string }
  | {
      readonly kind: 'tcp';
      readonly host: string;
      readonly port: number;
      readonly tls: { readonly ca: string; readonly cert: string; readonly key: string } | null;
    }
  | { readonly kind: 'ssh'; readonly host: string; readonly port: number; readonly username: string | null };

const NODE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** The rule an endpoint breaks, or the parsed endpoint. Never echoes a password (ssh://user:pw@ is refused). */
export function parseEngineEndpoint(text: string): EngineEndpoint | { readonly problem: string } {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return { problem: 'must be a URL: unix:///abs/socket, tcp://host:port or ssh://[user@]host[:port]' };
  }
  switch (url.protocol) {
    case 'unix:': {
      if (url.host !== '' || !url.pathname.startsWith('/') || url.pathname === '/')
        return { problem: 'unix:// needs an absolute socket path (unix:///run/docker.sock)' };
      if (url.search !== '' || url.hash !== '') return { problem: 'unix:// takes no query or fragment' };
      return { kind: 'unix', socketPath: decodeURIComponent(url.pathname) };
    }
    case 'tcp:': {
      if (url.hostname === '' || url.port === '')
        return { problem: 'tcp:// needs a host and a port (tcp://host:2376)' };
      if (url.username !== '' || url.password !== '')
        return { problem: 'tcp:// takes no user or password (use TLS client certificates)' };
      if (url.pathname !== '' && url.pathname !== '/') return { problem: 'tcp:// takes no path' };
      const known = new Set(['ca', 'cert', 'key']);
      for (const key of url.searchParams.keys())
        if (!known.has(key))
          return { problem: `tcp:// query parameter "${key}" is not one of ca, cert, key` };
      const ca = url.searchParams.get('ca');
      const cert = url.searchParams.get('cert');
      const key = url.searchParams.get('key');
      const given = [ca, cert, key].filter((v) => v !== null);
      if (given.length !== 0 && given.length !== 3)
        return { problem: 'TLS needs all three of ca=, cert= and key= (absolute file paths)' };
      if (given.some((v) => !v.startsWith('/')))
        return { problem: 'ca=, cert= and key= must be absolute file paths' };
      return {
        kind: 'tcp',
        host: url.hostname,
        port: Number(url.port),
        tls: ca !== null && cert !== null && key !== null ? { ca, cert, key } : null,
      };
    }
    case 'ssh:': {
      if (url.hostname === '') return { problem: 'ssh:// needs a host (ssh://user@host)' };
      if (url.password !== '')
        return { problem: 'ssh:// must not carry a password (use an SSH agent or key)' };
      if ((url.pathname !== '' && url.pathname !== '/') || url.search !== '')
        return { problem: 'ssh:// takes no path or query' };
      return {
        kind: 'ssh',
        host: url.hostname,
        port: url.port === '' ? 22 : Number(url.port),
        username: url.username === '' ? null : decodeURIComponent(url.username),
      };
    }
    default:
      return { problem: `scheme ${url.protocol.replace(/:$/, '')} is not one of unix, tcp, ssh` };
  }
}

export interface ExecutorFlags {
  readonly executor?: string | undefined;
  readonly manager?: string | undefined;
  readonly 'node-engine'?: readonly string[] | undefined;
}

/**
 * `--executor local|swarm`, `--manager URL`, `--node-engine NODE=URL` (repeatable) → the executor, or an
 * InvalidInputError (exit 2) naming the flag and the rule. Swarm needs a manager and at least one node engine.
 */
export function executorFromFlags(flags: ExecutorFlags): ExecutorConfig {
  const issues: Issue[] = [];
  const kind = flags.executor ?? 'local';
  const nodeFlags = flags['node-engine'] ?? [];
  if (kind !== 'local' && kind !== 'swarm')
    issues.push({ path: '--executor', rule: `must be local or swarm (got "${kind}")` });
  if (kind === 'local') {
    if (flags.manager !== undefined) issues.push({ path: '--manager', rule: 'only with --executor swarm' });
    if (nodeFlags.length > 0) issues.push({ path: '--node-engine', rule: 'only with --executor swarm' });
  }
  if (kind === 'swarm') {
    if (flags.manager === undefined)
      issues.push({
        path: '--manager',
        rule: "required with --executor swarm (the manager's engine, e.g. unix:///run/docker.sock or tcp://host:2376)",
      });
    else {
      const parsed = parseEngineEndpoint(flags.manager);
      if ('problem' in parsed) issues.push({ path: '--manager', rule: parsed.problem });
    }
    if (nodeFlags.length === 0)
      issues.push({
        path: '--node-engine',
        rule: "at least one NODE=URL with --executor swarm (each node's engine: outcome and sessions are read back through it)",
      });
  }
  const nodes: Record<string, string> = {};
  for (const [i, entry] of nodeFlags.entries()) {
    const at = `--node-engine[${i}]`;
    const eq = entry.indexOf('=');
    if (eq <= 0) {
      issues.push({ path: at, rule: "must be NODE=URL (NODE: the node's hostname or id)" });
      continue;
    }
    const node = entry.slice(0, eq);
    const url = entry.slice(eq + 1);
    if (!NODE_NAME.test(node))
      issues.push({
        path: at,
        rule: 'NODE must be 1-128 of [A-Za-z0-9._-], starting with a letter or digit',
      });
    else if (Object.hasOwn(nodes, node)) issues.push({ path: at, rule: `node ${node} is given twice` });
    const parsed = parseEngineEndpoint(url);
    if ('problem' in parsed) issues.push({ path: at, rule: parsed.problem });
    else if (NODE_NAME.test(node)) nodes[node] = url;
  }
  if (issues.length > 0) throw new InvalidInputError('E_USAGE', 'invalid executor flags', issues);
  if (kind === 'local') return LOCAL_EXECUTOR;
  return { kind: 'swarm', manager: flags.manager as string, node_engines: nodes };
}

/** An executor read back from batch.json; absent (batches from before issue 13) means local. */
export function executorOfRecord(recorded: unknown): ExecutorConfig {
  if (recorded === undefined || recorded === null) return LOCAL_EXECUTOR;
  const r = recorded as { kind?: unknown; manager?: unknown; node_engines?: unknown };
  if (r.kind === 'local') return LOCAL_EXECUTOR;
  if (
    r.kind === 'swarm' &&
    typeof r.manager === 'string' &&
    typeof r.node_engines === 'object' &&
    r.node_engines !== null
  ) {
    return executorFromFlags({
      executor: 'swarm',
      manager: r.manager,
      'node-engine': Object.entries(r.node_engines as Record<string, unknown>).map(
        ([k, v]) => `${k}=${String(v)}`,
      ),
    });
  }
  throw new InvalidInputError('E_BATCH_STATE', 'batch.json has an unreadable executor', [
    { path: 'executor', rule: 'must be {kind: local} or {kind: swarm, manager, node_engines}' },
  ]);
}
