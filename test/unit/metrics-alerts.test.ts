import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * The three alert rules of docs/metrics.md (docs/metrics-alerts.yml) through Prometheus' own tool: `promtool check
 * rules` accepts the file, and `promtool test rules` fires each alert on the series that should fire it, and not on
 * the near misses (a supervisor down with nothing claimed, a batch paused for another reason). Skipped without
 * promtool (Debian's `prometheus` package, which .ci/run installs), failed instead with REQUIRE_PROMETHEUS=1.
 */
const PROMTOOL = '/usr/bin/promtool';
const RULES = resolve(import.meta.dirname, '../../docs/metrics-alerts.yml');
const missing = !existsSync(PROMTOOL);
if (missing && process.env['REQUIRE_PROMETHEUS'] === '1')
  throw new Error(`REQUIRE_PROMETHEUS=1 but no ${PROMTOOL}`);

const at = 'instance: "h1:9464", job: "exporter"';
const series = (name: string, labels: string, values: string): string =>
  `      - series: '${name}{instance="h1:9464",job="exporter",${labels}}'\n        values: '${values}'`;

const TESTS = `rule_files:
  - ${RULES}
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
${series('roboguide_supervisor_up', 'batch="b1"', '1 1 0 0 0 0')}
${series('roboguide_batch_pairs', 'batch="b1",state="claimed"', '1 1 1 1 1 1')}
${series('roboguide_supervisor_up', 'batch="b2"', '0 0 0 0 0 0')}
${series('roboguide_batch_pairs', 'batch="b2",state="claimed"', '0 0 0 0 0 0')}
${series('roboguide_containers_unverified', 'batch="b1"', '0 0 0 2 2 0')}
${series('roboguide_batch_paused', 'batch="b1",reason="infrastructure_streak"', '0 0 0 0 1 1')}
${series('roboguide_batch_paused', 'batch="b2",reason="harness"', '1 1 1 1 1 1')}
    alert_rule_test:
      - eval_time: 2m
        alertname: RoboguideSupervisorGoneWithClaimedPairs
        exp_alerts: []
      - eval_time: 4m
        alertname: RoboguideSupervisorGoneWithClaimedPairs
        exp_alerts:
          - exp_labels: { severity: critical, batch: b1, ${at} }
            exp_annotations:
              summary: 'Batch b1: supervisor down with claimed pairs'
              description: 'Run \`roboguide-eval e1-batch resume --output DIR\` for this batch on h1:9464.'
      - eval_time: 2m
        alertname: RoboguideContainersLeftUnverified
        exp_alerts: []
      - eval_time: 3m
        alertname: RoboguideContainersLeftUnverified
        exp_alerts:
          - exp_labels: { severity: critical, batch: b1, ${at} }
            exp_annotations:
              summary: 'Batch b1: 2 container(s) not proven removed'
              description: 'Check the engine, then \`e1-batch resume\` removes them again, insisting on the 404.'
      - eval_time: 5m
        alertname: RoboguideContainersLeftUnverified
        exp_alerts: []
      - eval_time: 3m
        alertname: RoboguideInfrastructureStreak
        exp_alerts: []
      - eval_time: 4m
        alertname: RoboguideInfrastructureStreak
        exp_alerts:
          - exp_labels: { severity: warning, batch: b1, reason: infrastructure_streak, ${at} }
            exp_annotations:
              summary: 'Batch b1 paused: a streak of infrastructure failures'
              description: 'See \`e1-batch status\` (failed pairs and their reasons); \`e1-batch resume\` after the fix.'
`;

describe.skipIf(missing)('alert rules (docs/metrics-alerts.yml) under promtool', () => {
  it('promtool check rules accepts the file', () => {
    const run = spawnSync(PROMTOOL, ['check', 'rules', RULES], { encoding: 'utf8' });
    expect(run.status, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toContain('3 rules found');
  });

  it('each alert fires on what it is for and not on the near misses (promtool test rules)', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'rg-alerts-'));
    try {
      await writeFile(join(dir, 'tests.yml'), TESTS);
      const run = spawnSync(PROMTOOL, ['test', 'rules', join(dir, 'tests.yml')], { encoding: 'utf8' });
      expect(run.status, run.stdout + run.stderr).toBe(0);
      expect(run.stdout).toContain('SUCCESS');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
