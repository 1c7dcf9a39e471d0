import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ServeMetrics } from '../../src/adapters/http/serve-metrics.js';
import { ExporterMetrics } from '../../src/adapters/metrics/exporter-metrics.js';
import { hostSnapshot } from '../support/metrics-snapshot.js';

/**
 * docs/grafana-dashboard.json (issue 45): the structure Grafana's dashboard model needs (uid, title, schemaVersion,
 * panels with unique ids, a known type, a grid position inside the 24 columns, Prometheus targets with a refId and
 * an expression), and every metric a panel's query or variable names is one the exporter or serve really exposes
 * (rendered here from a populated snapshot and one observed request).
 */
interface Target {
  refId?: unknown;
  expr?: unknown;
}
interface Panel {
  id?: unknown;
  type?: unknown;
  title?: unknown;
  gridPos?: { x?: unknown; y?: unknown; w?: unknown; h?: unknown };
  targets?: Target[];
  panels?: unknown[];
}
interface Dashboard {
  uid?: unknown;
  title?: unknown;
  schemaVersion?: unknown;
  panels?: Panel[];
  templating?: { list?: { name?: unknown; query?: { query?: unknown } | string }[] };
}

const PANEL_TYPES = new Set(['row', 'timeseries', 'stat', 'table', 'bargauge', 'gauge']);

async function exposedNames(): Promise<Set<string>> {
  const exporter = new ExporterMetrics();
  exporter.apply(hostSnapshot(), 0.01);
  const serve = new ServeMetrics({ sessions: () => 1, pairs: () => 0 });
  serve.observe('POST', '/v1/sessions/{id}/exec', 200, 0.2);
  serve.registryCalls.duration.observe({ operation: 'admit', outcome: 'ok' }, 0.001);
  serve.registryCalls.unavailable.inc({ operation: 'admit' });
  const text = (await exporter.register.metrics()) + (await serve.register.metrics());
  return new Set(
    text
      .split('\n')
      .filter((l) => l !== '' && !l.startsWith('#'))
      .map((l) => /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(l)![0]),
  );
}

/** Our metric names an expression uses (`roboguide_…`, with a histogram's `_bucket`). */
function metricsIn(expr: string): string[] {
  return [...expr.matchAll(/\broboguide_[a-z0-9_]+/g)].map((m) => m[0]);
}

describe('the Grafana dashboard (docs/grafana-dashboard.json)', () => {
  it('has the structure of a Grafana dashboard, and every query names a metric that exists', async () => {
    const raw = await readFile(resolve(import.meta.dirname, '../../docs/grafana-dashboard.json'), 'utf8');
    const dashboard = JSON.parse(raw) as Dashboard;
    expect(typeof dashboard.uid).toBe('string');
    expect(typeof dashboard.title).toBe('string');
    expect(Number.isInteger(dashboard.schemaVersion)).toBe(true);
    const panels = dashboard.panels ?? [];
    expect(panels.length).toBeGreaterThan(10);
    const ids = panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    const names = await exposedNames();
    const used = new Set<string>();
    for (const panel of panels) {
      const where = `panel ${String(panel.id)} (${String(panel.title)})`;
      expect(PANEL_TYPES.has(panel.type as string), where).toBe(true);
      expect(typeof panel.title, where).toBe('string');
      const { x, y, w, h } = panel.gridPos ?? {};
      for (const n of [x, y, w, h]) expect(Number.isInteger(n), where).toBe(true);
      expect((x as number) + (w as number), where).toBeLessThanOrEqual(24);
      if (panel.type === 'row') continue;
      expect(panel.targets?.length ?? 0, where).toBeGreaterThan(0);
      for (const target of panel.targets ?? []) {
        expect(typeof target.refId, where).toBe('string');
        expect(typeof target.expr, where).toBe('string');
        const metrics = metricsIn(target.expr as string);
        expect(metrics.length, `${where}: ${String(target.expr)}`).toBeGreaterThan(0);
        for (const metric of metrics) {
          expect(names.has(metric), `${where} names ${metric}, which nothing exposes`).toBe(true);
          used.add(metric.replace(/_(bucket|count|sum)$/, ''));
        }
      }
    }
    for (const variable of dashboard.templating?.list ?? []) {
      const query = typeof variable.query === 'string' ? variable.query : variable.query?.query;
      for (const metric of metricsIn(String(query)))
        expect(names.has(metric), String(variable.name)).toBe(true);
    }
    // It shows what the issue asks for: each of these families is on a panel.
    for (const family of [
      'roboguide_pairs_finished_total',
      'roboguide_pair_reasons_total',
      'roboguide_pair_duration_seconds',
      'roboguide_pair_phase_duration_seconds',
      'roboguide_batch_queue_depth',
      'roboguide_batch_eta_seconds',
      'roboguide_batch_state',
      'roboguide_batch_paused',
      'roboguide_slots_held',
      'roboguide_slots_free',
      'roboguide_gpu_memory_admitted_bytes',
      'roboguide_gpu_memory_budget_bytes',
      'roboguide_pair_log_bytes_total',
      'roboguide_pair_outcome_redactions_total',
      'roboguide_containers_unverified',
      'roboguide_registry_call_duration_seconds',
      'roboguide_registry_unavailable_total',
      'roboguide_serve_sessions_live',
      'roboguide_serve_exec_duration_seconds',
      'roboguide_serve_http_requests_total',
      'roboguide_supervisor_up',
      'roboguide_supervisor_heartbeat_age_seconds',
    ])
      expect(used.has(family), family).toBe(true);
  });
});
