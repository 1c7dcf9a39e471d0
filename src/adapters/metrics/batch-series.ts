import type { Counter, Histogram } from 'prom-client';

type Labels = Record<string, string>;
type Removable = Counter<string> | Histogram<string>;

/**
 * The label sets each batch's accumulated series (counters and histograms fed by increments) were given, so that a
 * batch that leaves the export, or whose journal starts again, takes every one of its series with it: the label set
 * stays bounded by the batches exported (docs/metrics.md "Labels").
 */
export class BatchSeries {
  readonly #byBatch = new Map<string, Map<Removable, Map<string, Labels>>>();

  note(batch: string, metric: Removable, labels: Labels): Labels {
    let metrics = this.#byBatch.get(batch);
    if (metrics === undefined)
      this.#byBatch.set(batch, (metrics = new Map<Removable, Map<string, Labels>>()));
    let sets = metrics.get(metric);
    if (sets === undefined) metrics.set(metric, (sets = new Map<string, Labels>()));
    sets.set(JSON.stringify(labels), labels);
    return labels;
  }

  drop(batch: string): void {
    for (const [metric, sets] of this.#byBatch.get(batch) ?? [])
      for (const labels of sets.values()) metric.remove(labels);
    this.#byBatch.delete(batch);
  }

  batches(): string[] {
    return [...this.#byBatch.keys()];
  }
}
