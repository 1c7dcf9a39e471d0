import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { RegistryCallMetrics } from '../metrics/instrumented-registry.js';

const HTTP_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800];
/** The exec route's pattern: its requests are also the exec latency. */
export const EXEC_ROUTE = '/v1/sessions/{id}/exec';

/**
 * `serve`'s Prometheus series (docs/metrics.md): HTTP requests by route pattern (never the path: ids stay out of
 * labels), the exec latency, live sessions and running pairs, and the registry calls of this process.
 */
export class ServeMetrics {
  readonly register = new Registry();
  readonly registryCalls = new RegistryCallMetrics(this.register);
  readonly #requests = new Counter({
    name: 'roboguide_serve_http_requests_total',
    help: 'HTTP requests answered, by method, route pattern and status code (route "unmatched": no route).',
    labelNames: ['method', 'route', 'code'],
    registers: [this.register],
  });
  readonly #duration = new Histogram({
    name: 'roboguide_serve_http_request_duration_seconds',
    help: 'HTTP requests from arrival to the end of the answer, by method and route pattern.',
    labelNames: ['method', 'route'],
    buckets: HTTP_BUCKETS,
    registers: [this.register],
  });
  readonly #exec = new Histogram({
    name: 'roboguide_serve_exec_duration_seconds',
    help: 'Execs in sessions (POST /v1/sessions/{id}/exec, JSON or streamed) from request to the end of the answer, by status code.',
    labelNames: ['code'],
    buckets: HTTP_BUCKETS,
    registers: [this.register],
  });

  constructor(live: { sessions: () => number; pairs: () => number }) {
    new Gauge({
      name: 'roboguide_serve_sessions_live',
      help: 'Sessions this server holds now.',
      registers: [this.register],
      collect() {
        this.set(live.sessions());
      },
    });
    new Gauge({
      name: 'roboguide_serve_pairs_running',
      help: 'Pairs (POST /v1/pairs) of this server running now.',
      registers: [this.register],
      collect() {
        this.set(live.pairs());
      },
    });
    collectDefaultMetrics({ register: this.register });
  }

  /** One request answered (`route`: the matched pattern, or "unmatched"). */
  observe(method: string, route: string, code: number, seconds: number): void {
    const known = ['GET', 'POST', 'PUT', 'DELETE', 'HEAD', 'PATCH'].includes(method) ? method : 'other';
    this.#requests.inc({ method: known, route, code: String(code) });
    this.#duration.observe({ method: known, route }, seconds);
    if (route === EXEC_ROUTE && known === 'POST') this.#exec.observe({ code: String(code) }, seconds);
  }
}
