import { Counter, Histogram, type Registry } from 'prom-client';
import type { CapacityRegistry } from '../../app/ports/capacity-registry.js';

/** Seconds: a SQLite call takes about a millisecond, a PostgreSQL one a few; the deadline is 10 s by default. */
const REGISTRY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/** The registry call metrics of one process (serve, the exporter): `operation` is a method of the port. */
export class RegistryCallMetrics {
  readonly duration: Histogram<'operation' | 'outcome'>;
  readonly unavailable: Counter<'operation'>;

  constructor(register: Registry) {
    this.duration = new Histogram({
      name: 'roboguide_registry_call_duration_seconds',
      help: 'Capacity registry calls of this process by operation (a port method) and outcome (ok, error, unavailable).',
      labelNames: ['operation', 'outcome'],
      buckets: REGISTRY_BUCKETS,
      registers: [register],
    });
    this.unavailable = new Counter({
      name: 'roboguide_registry_unavailable_total',
      help: 'Capacity registry calls of this process that failed E_REGISTRY_UNAVAILABLE (late or unreachable).',
      labelNames: ['operation'],
      registers: [register],
    });
  }
}

function codeOf(err: unknown): string | undefined {
  return typeof err === 'object' && err !== null && 'code' in err && typeof err.code === 'string'
    ? err.code
    : undefined;
}

/**
 * The same registry, every asynchronous method timed (one place, whatever calls it): its latency by operation and
 * outcome, and each `E_REGISTRY_UNAVAILABLE` counted. Behaviour is unchanged: results and errors pass through.
 */
export function instrumentRegistry(
  registry: CapacityRegistry,
  metrics: RegistryCallMetrics,
): CapacityRegistry {
  return new Proxy(registry, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== 'function' || typeof property !== 'string') return value;
      const method = value as (...args: unknown[]) => unknown;
      return (...args: unknown[]): unknown => {
        const end = metrics.duration.startTimer({ operation: property });
        let result: unknown;
        try {
          result = method.apply(target, args);
        } catch (err) {
          end({ outcome: 'error' });
          throw err;
        }
        if (!(result instanceof Promise)) {
          end({ outcome: 'ok' });
          return result;
        }
        return result.then(
          (v: unknown) => {
            end({ outcome: 'ok' });
            return v;
          },
          (err: unknown) => {
            const unavailable = codeOf(err) === 'E_REGISTRY_UNAVAILABLE';
            end({ outcome: unavailable ? 'unavailable' : 'error' });
            if (unavailable) metrics.unavailable.inc({ operation: property });
            throw err;
          },
        );
      };
    },
  });
}
