import { describe, expect, it } from 'vitest';
import { ExporterMetrics } from '../../src/adapters/metrics/exporter-metrics.js';
import { batchSnapshot, finishedPair, hostSnapshot } from '../support/metrics-snapshot.js';

/** Lines of the Prometheus text for one metric name (samples only, no HELP/TYPE). */
async function samples(metrics: ExporterMetrics, name: string): Promise<string[]> {
  const text = await metrics.register.metrics();
  return text.split('\n').filter((line) => line.startsWith(`${name}{`) || line.startsWith(`${name} `));
}

describe('the exporter series (ExporterMetrics)', () => {
  it('turns a snapshot into the series of docs/metrics.md, in base units', async () => {
    const m = new ExporterMetrics({ processMetrics: false });
    m.apply(hostSnapshot(), 0.004);
    const b = 'batch="e1-20261205-aaaaaaaa"';
    expect(await samples(m, 'roboguide_batch_state')).toContain(
      `roboguide_batch_state{${b},state="running"} 1`,
    );
    expect(await samples(m, 'roboguide_batch_state')).toContain(
      `roboguide_batch_state{${b},state="paused"} 0`,
    );
    expect(await samples(m, 'roboguide_pairs_finished_total')).toContain(
      `roboguide_pairs_finished_total{${b},classification="harness_failure"} 1`,
    );
    expect(await samples(m, 'roboguide_pair_reasons_total')).toEqual([
      `roboguide_pair_reasons_total{${b},reason="timeout"} 1`,
    ]);
    expect(await samples(m, 'roboguide_pair_duration_seconds_count')).toEqual([
      `roboguide_pair_duration_seconds_count{${b},classification="completed"} 1`,
      `roboguide_pair_duration_seconds_count{${b},classification="infrastructure_failure"} 1`,
    ]);
    expect(await samples(m, 'roboguide_pair_phase_duration_seconds_sum')).toContain(
      `roboguide_pair_phase_duration_seconds_sum{${b},phase="run"} 80`,
    );
    expect(await samples(m, 'roboguide_gpu_memory_admitted_bytes')).toEqual([
      `roboguide_gpu_memory_admitted_bytes{node="gpu-host-1"} ${20_000 * 1024 * 1024}`,
    ]);
    expect(await samples(m, 'roboguide_slots_free')).toEqual(['roboguide_slots_free{node="gpu-host-1"} 1']);
    expect(await samples(m, 'roboguide_batch_eta_seconds')).toEqual([
      `roboguide_batch_eta_seconds{${b}} 600`,
    ]);
    expect(await samples(m, 'roboguide_batch_recent_failure')).toEqual([
      `roboguide_batch_recent_failure{${b},job_id="j7",classification="infrastructure_failure",reason="timeout"} 1`,
    ]);
    expect(await samples(m, 'roboguide_registry_up')).toEqual(['roboguide_registry_up 1']);
  });

  it('adds only what finished since the last scan; a reset starts the batch again', async () => {
    const m = new ExporterMetrics({ processMetrics: false });
    m.apply(hostSnapshot(), 0);
    m.apply(hostSnapshot({ batches: [batchSnapshot({ finished: [finishedPair()] })] }), 0);
    const b = 'batch="e1-20261205-aaaaaaaa"';
    expect(await samples(m, 'roboguide_pair_duration_seconds_count')).toContain(
      `roboguide_pair_duration_seconds_count{${b},classification="completed"} 2`,
    );
    m.apply(hostSnapshot({ batches: [batchSnapshot({ finished: [finishedPair()], reset: true })] }), 0);
    expect(await samples(m, 'roboguide_pair_duration_seconds_count')).toEqual([
      `roboguide_pair_duration_seconds_count{${b},classification="completed"} 1`,
    ]);
  });

  it('drops every series of a batch that left the export (bounded labels), and says when the registry is down', async () => {
    const m = new ExporterMetrics({ processMetrics: false });
    m.apply(hostSnapshot(), 0);
    m.apply(hostSnapshot({ batches: [], registry: null }), 0);
    const text = await m.register.metrics();
    expect(text).not.toContain('e1-20261205-aaaaaaaa');
    expect(await samples(m, 'roboguide_registry_up')).toEqual(['roboguide_registry_up 0']);
    expect(await samples(m, 'roboguide_slots_held')).toEqual([]);
  });
});
