import { chmod, lstat, unlink } from 'node:fs/promises';
import { openOwnFolder } from '../fs/private-dir.js';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect } from 'node:net';
import { dirname } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';

type IntervalHistogram = ReturnType<typeof monitorEventLoopDelay>;
import { ApiError } from '../../app/serve/api-error.js';
import { openApiDocument } from '../../app/serve/openapi.js';
import { IMAGE_REF_RULE } from '../../app/serve/request-fields.js';
import { isImageReference } from '../../core/image-build.js';
import type { PairService } from '../../app/serve/pair-service.js';
import type { Logger } from '../../app/ports/logger.js';
import type { SessionEngine } from '../../app/ports/container-runtime.js';
import type { SessionManager } from '../../app/serve/session-manager.js';
import { bearerMatches, Router, sendError, sendJson, strictQuery, type Handler } from './http-kit.js';
import type { ServeMetrics } from './serve-metrics.js';
import { registerPairRoutes } from './pair-routes.js';
import { registerImageRoutes, type ImageRouteDeps } from './image-routes.js';
import { registerImagePullRoute, type ImagePullRouteDeps } from './image-pull-route.js';
import { registerSessionRoutes, type SessionRouteDeps } from './session-routes.js';

export interface ApiServerOptions {
  readonly socketPath: string;
  /** `127.0.0.1:PORT`: TCP as well, every request then needs `Authorization: Bearer <token>`. */
  readonly listen?: { readonly host: string; readonly port: number; readonly token: string };
  readonly version: string;
  readonly sessions: SessionManager;
  readonly pairs: PairService;
  readonly engine: SessionEngine;
  readonly tempRoot: string;
  readonly createRedactor: SessionRouteDeps['createRedactor'];
  readonly streamBufferCap: number;
  readonly logger: Logger;
  /** GET /metrics and every request observed (issue 45); absent: no metrics. */
  readonly metrics?: ServeMetrics;
  /** `--metrics-listen`: a loopback TCP listener that serves only /metrics, with the bearer token of `listen`. */
  readonly metricsListen?: { readonly host: string; readonly port: number; readonly token: string };
  /** POST /v1/images (issue 23); absent: the route is not served. */
  readonly images?: Omit<ImageRouteDeps, 'tempRoot' | 'logger'>;
  /** POST /v1/images/pull (issue 43); absent: the route is not served. */
  readonly imagePulls?: Omit<ImagePullRouteDeps, 'logger'>;
}

export interface RunningApiServer {
  readonly socketPath: string;
  readonly tcpPort: number | null;
  readonly metricsPort: number | null;
  close(): Promise<void>;
}

function buildRouter(options: ApiServerOptions, loop: IntervalHistogram): Router {
  const router = new Router();
  const openapi = openApiDocument(options.version);
  router.add('GET', '/v1/health', async ({ res }) => {
    let version: string | null;
    try {
      version = (await options.engine.info()).version;
    } catch {
      version = null;
    }
    sendJson(res, 200, {
      ok: version !== null,
      engine: { reachable: version !== null, version },
      version: options.version,
      // The longest the event loop was held since the server started listening (no request may hold it long).
      event_loop: { max_delay_ms: Math.round(loop.max / 1e5) / 10 },
    });
  });
  router.add('GET', '/v1/openapi.json', ({ res }) => {
    sendJson(res, 200, openapi);
    return Promise.resolve();
  });
  router.add('GET', '/v1/images', async ({ res, query }) => {
    const ref = query.get('ref') ?? '';
    if (ref === '') throw ApiError.invalid('the image request', [{ path: 'ref', rule: 'is required' }]);
    if (!isImageReference(ref))
      throw ApiError.invalid('the image request', [{ path: 'ref', rule: IMAGE_REF_RULE }]);
    sendJson(res, 200, { ref, present: await options.engine.imageExists(ref) });
  });
  registerSessionRoutes(router, {
    sessions: options.sessions,
    engine: options.engine,
    tempRoot: options.tempRoot,
    createRedactor: options.createRedactor,
    streamBufferCap: options.streamBufferCap,
    logger: options.logger,
  });
  registerPairRoutes(router, options.pairs);
  const metrics = options.metrics;
  if (metrics !== undefined) router.add('GET', '/metrics', metricsHandler(metrics));
  if (options.imagePulls !== undefined)
    registerImagePullRoute(router, { ...options.imagePulls, logger: options.logger });
  if (options.images !== undefined)
    registerImageRoutes(router, { ...options.images, tempRoot: options.tempRoot, logger: options.logger });
  return router;
}

/**
 * The socket's folder must be ours and writable by no one else (socket-folder.ts; UnsafePathError otherwise). A stale
 * socket file (no server answers on it) is removed; a live one means another server: refuse.
 */
async function claimSocketPath(path: string): Promise<void> {
  await (await openOwnFolder(dirname(path))).close();
  const info = await lstat(path).catch(() => null);
  if (info === null) return;
  if (!info.isSocket()) throw new ApiError(409, 'E_SOCKET_IN_USE', `${path} exists and is not a socket`);
  const alive = await new Promise<boolean>((resolve) => {
    const probe = connect(path);
    probe.once('connect', () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', () => resolve(false));
  });
  if (alive) throw new ApiError(409, 'E_SOCKET_IN_USE', `another server answers on ${path}`);
  await unlink(path);
}

function listen(server: Server, target: string | { host: string; port: number }): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    const done = (): void => {
      server.off('error', reject);
      resolve();
    };
    if (typeof target === 'string') server.listen(target, done);
    else server.listen(target.port, target.host, done);
  });
}

/** GET /metrics: the Prometheus text format. */
function metricsHandler(metrics: ServeMetrics): Handler {
  return async ({ res }) => {
    const text = await metrics.register.metrics();
    res.writeHead(200, { 'content-type': metrics.register.contentType });
    res.end(text);
  };
}

/** Counts the answer once it is sent (or the client went away: status as far as it was set). */
function observeAnswer(
  metrics: ServeMetrics | undefined,
  req: IncomingMessage,
  res: ServerResponse,
): (route: string) => void {
  if (metrics === undefined) return () => undefined;
  const began = process.hrtime.bigint();
  let route = 'unmatched';
  res.once('close', () =>
    metrics.observe(
      req.method ?? 'GET',
      route,
      res.statusCode,
      Number(process.hrtime.bigint() - began) / 1e9,
    ),
  );
  return (matched) => {
    route = matched;
  };
}

/** node:http on a unix socket (0600) and, optionally, loopback TCP with a bearer token. */
export async function startApiServer(options: ApiServerOptions): Promise<RunningApiServer> {
  const loop = monitorEventLoopDelay({ resolution: 10 });
  const router = buildRouter(options, loop);
  const metricsOnly = new Router();
  if (options.metrics !== undefined) metricsOnly.add('GET', '/metrics', metricsHandler(options.metrics));
  const unixServer = await listenUnix(options.socketPath, requestHandler(options, router, null));
  loop.enable();
  const tcp = options.listen
    ? await listenTcp(options.listen, requestHandler(options, router, options.listen.token))
    : null;
  const metrics = options.metricsListen
    ? await listenTcp(
        options.metricsListen,
        requestHandler(options, metricsOnly, options.metricsListen.token),
      )
    : null;
  const closeOne = (server: Server): Promise<void> =>
    new Promise((resolve) => {
      server.close(() => resolve());
      server.closeIdleConnections();
    });
  return {
    socketPath: options.socketPath,
    tcpPort: tcp?.port ?? null,
    metricsPort: metrics?.port ?? null,
    close: async () => {
      loop.disable();
      await Promise.all(
        [unixServer, tcp?.server, metrics?.server].flatMap((server) => (server ? [closeOne(server)] : [])),
      );
      await unlink(options.socketPath).catch(() => undefined);
    },
  };
}

/**
 * One request: the bearer token checked (`token`; null on the unix socket), the route matched and its handler run;
 * any error answered as `{"error": …}`. `clientGone` aborts when the client leaves before the answer is sent.
 */
function requestHandler(
  options: ApiServerOptions,
  routes: Router,
  token: string | null,
): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    const gone = new AbortController();
    res.once('close', () => {
      if (!res.writableFinished) gone.abort();
    });
    const routed = observeAnswer(options.metrics, req, res);
    void (async () => {
      try {
        if (token !== null && !bearerMatches(req.headers.authorization, token)) {
          res.setHeader('www-authenticate', 'Bearer');
          sendJson(res, 401, {
            error: { code: 'E_UNAUTHORIZED', message: 'a valid bearer token is required', issues: [] },
          });
          req.resume();
          return;
        }
        const url = new URL(req.url ?? '/', 'http://localhost');
        const matched = routes.match(req.method ?? 'GET', url.pathname);
        if (matched === null) throw ApiError.notFound(`route ${url.pathname}`);
        if (matched !== 'method') routed(matched.route);
        if (matched === 'method')
          throw new ApiError(404, 'E_NOT_FOUND', `${req.method ?? ''} is not supported on ${url.pathname}`);
        await matched.handler({
          req,
          res,
          params: matched.params,
          query: strictQuery(url.search),
          clientGone: gone.signal,
        });
      } catch (err) {
        sendError(res, err, options.logger, req);
      }
    })();
  };
}

/** The unix socket, created 0600 (no moment at a wider mode: the umask is narrowed while it is bound). */
async function listenUnix(
  socketPath: string,
  handler: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<Server> {
  await claimSocketPath(socketPath);
  const server = createServer({ keepAliveTimeout: 30_000 }, handler);
  const previous = process.umask(0o177);
  try {
    await listen(server, socketPath);
  } finally {
    process.umask(previous);
  }
  await chmod(socketPath, 0o600);
  return server;
}

/** A TCP listener (`--listen`, `--metrics-listen`) and the port it got. */
async function listenTcp(
  at: { readonly host: string; readonly port: number },
  handler: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<{ server: Server; port: number }> {
  const server = createServer({ keepAliveTimeout: 30_000 }, handler);
  await listen(server, { host: at.host, port: at.port });
  return { server, port: (server.address() as { port: number }).port };
}
