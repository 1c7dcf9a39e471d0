// Images at batch scale (issue 43): the makespan of a batch whose images are pulled ahead from a real registry within
// a disk budget of a third of their size, against the same batch with every image already present, run side by side
// (alternating, each ROUNDS times; medians). Debian's docker-registry on 127.0.0.1:5954, images built by the engine
// FROM roboguide/pair-driver:1 plus a shared 4 MiB layer per group and a random layer of MIN..MAX MiB, pushed, then
// removed. Also reports the largest sampled store (the images of the prefix) against the budget, and pulls/evictions.
// Checked per run, from the evidence: every pair's receipt names the digest frozen in batch.json (planned runs), no
// image pulled twice unless evicted in between (the journal's `image` records), and the registry's own access log
// (manifest GETs by digest: what the engine really fetched). Jobs are in manifest order, JOBS/IMAGES consecutive jobs
// per image (no reordering: the dispatch order is the manifest's); the rounds alternate which run goes first.
// Needs the compiled output and the synthetic images (`npm run build`, `bin/roboguide-eval images build`):
//   node bench/image-plan.bench.js [jobs] [images] [minMiB] [maxMiB] [sleepSec] [rounds]   (defaults 120 40 20 80 3 2)
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import {
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { median } from './support.js';

const [JOBS, IMAGES, MIN, MAX, SLEEP, ROUNDS] = [120, 40, 20, 80, 3, 2].map((d, i) =>
  Number(process.argv[2 + i] ?? d),
);
const HOST = '127.0.0.1:5954'; // not 5943/5944: test/integration/image-plan.int.test.ts uses those
const PREFIX = 'rg43-bench';
const BIN = resolve(import.meta.dirname, '../bin/run.js');
const root = mkdtempSync(join(tmpdir(), 'rg43-bench-'));

function prefixImages() {
  const out = spawnSync(
    'docker',
    ['images', '-q', '--no-trunc', '--filter', `reference=${HOST}/${PREFIX}-*`],
    {
      encoding: 'utf8',
    },
  );
  const ids = [...new Set(out.stdout.split('\n').filter(Boolean))];
  return ids.map(
    (id) =>
      Number(
        spawnSync('docker', ['image', 'inspect', '--format', '{{.Size}}', id], {
          encoding: 'utf8',
        }).stdout.trim(),
      ) || 0,
  );
}
function removeImages() {
  const out = spawnSync(
    'docker',
    ['images', '-q', '--no-trunc', '--filter', `reference=${HOST}/${PREFIX}-*`],
    { encoding: 'utf8' },
  );
  for (const id of new Set(out.stdout.split('\n').filter(Boolean)))
    spawnSync('docker', ['rmi', '-f', id], { stdio: 'ignore' });
}

mkdirSync(join(root, 'data'));
writeFileSync(
  join(root, 'config.yml'),
  `version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: ${join(root, 'data')}\nhttp:\n  addr: ${HOST}\n`,
);
const registry = spawn('/usr/bin/docker-registry', ['serve', join(root, 'config.yml')], {
  stdio: ['ignore', openSync(join(root, 'registry.log'), 'a'), openSync(join(root, 'registry.log'), 'a')],
});
try {
  for (let i = 0; ; i += 1) {
    const ok = await fetch(`http://${HOST}/v2/`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    if (i > 150) throw new Error('registry did not start');
    await new Promise((r) => setTimeout(r, 100));
  }
  removeImages();
  const ctx = join(root, 'ctx');
  mkdirSync(ctx);
  for (let g = 0; g < 4; g += 1)
    execFileSync('sh', ['-c', `head -c ${4 * 1024 * 1024} /dev/urandom > ${join(ctx, `g${g}.bin`)}`]);
  const refs = [];
  let randomTotal = 0;
  for (let i = 0; i < IMAGES; i += 1) {
    const mb = MIN + Math.round(((MAX - MIN) * ((i * 37) % IMAGES)) / Math.max(1, IMAGES - 1));
    randomTotal += mb * 1024 * 1024;
    execFileSync('sh', ['-c', `head -c ${mb * 1024 * 1024} /dev/urandom > ${join(ctx, 'own.bin')}`]);
    writeFileSync(
      join(ctx, 'Dockerfile'),
      `FROM roboguide/pair-driver:1\nCOPY g${i % 4}.bin /opt/g.bin\nCOPY own.bin /opt/own.bin\n`,
    );
    const ref = `${HOST}/${PREFIX}-${i}:1`;
    execFileSync('docker', ['build', '-q', '-t', ref, ctx], { stdio: 'ignore' });
    execFileSync('docker', ['push', ref], { stdio: 'ignore' });
    execFileSync('docker', ['rmi', ref], { stdio: 'ignore' });
    refs.push(ref);
  }
  // The store's bytes of every image pulled once (measured, then removed): the budget is a third of it.
  for (const ref of refs) execFileSync('docker', ['pull', '-q', ref], { stdio: 'ignore' });
  const total = prefixImages().reduce((a, b) => a + b, 0);
  const budget = Math.floor(total / 3);
  console.log(
    `${JOBS} jobs over ${IMAGES} images (${MIN}-${MAX} MiB random each, ${(randomTotal / 2 ** 20).toFixed(0)} MiB random, store ${(total / 2 ** 20).toFixed(0)} MiB), budget ${(budget / 2 ** 20).toFixed(0)} MiB, sleep=${SLEEP}s, ${ROUNDS} rounds`,
  );

  const run = async (name, capacity) => {
    const work = join(root, `${name}-work`);
    mkdirSync(join(work, 'out'), { recursive: true });
    const per = Math.ceil(JOBS / IMAGES);
    const manifest = {
      schema: 'roboguide.e1.batch/v0.1',
      jobs: Array.from({ length: JOBS }, (_, i) => ({
        job_id: `${name}-${i}`,
        image: refs[Math.floor(i / per)],
        argv: ['/opt/driver/run', `sleep=${SLEEP}`, 'outcome=completed'],
        cwd: work,
        outcome_path: join(work, 'out', `${i}.json`),
      })),
      capacity,
      stop_budget_seconds: 5,
    };
    writeFileSync(join(root, `${name}.json`), JSON.stringify(manifest));
    let peak = 0;
    const sampler = setInterval(
      () =>
        (peak = Math.max(
          peak,
          prefixImages().reduce((a, b) => a + b, 0),
        )),
      500,
    );
    const began = performance.now();
    const child = spawn(
      process.execPath,
      [
        BIN,
        'e1-batch',
        'start',
        '--manifest',
        join(root, `${name}.json`),
        '--output',
        join(root, `${name}-D`),
        '--registry',
        join(root, 'capacity.db'),
        '--foreground',
        '--json',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    child.stderr.on('data', (c) => (stderr += c));
    const logFrom = statSync(join(root, 'registry.log')).size;
    const code = await new Promise((r) => child.on('exit', r));
    if (code !== 0) console.log(`${name}: exit ${code}: ${stderr.slice(-2000)}`);
    const seconds = (performance.now() - began) / 1000;
    clearInterval(sampler);
    const journal = readFileSync(join(root, `${name}-D`, 'events.jsonl'), 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
    const count = (a) => journal.filter((e) => e.type === 'image' && e.action === a).length;
    const waited = journal.filter((e) => e.action === 'waited').reduce((s, e) => s + e.waited_ms, 0);
    const waits = journal.filter((e) => e.action === 'waited').length;
    // Pulled twice only after an eviction of that image in between.
    const twice = new Set();
    const pulledSinceEvict = new Map();
    for (const e of journal.filter((x) => x.type === 'image')) {
      if (e.action === 'evicted') pulledSinceEvict.set(e.ref, 0);
      if (e.action === 'pulled') {
        const n = (pulledSinceEvict.get(e.ref) ?? 0) + 1;
        pulledSinceEvict.set(e.ref, n);
        if (n > 1) twice.add(e.ref);
      }
    }
    // Every pair on the digest start froze (planned) and completed.
    const batch = JSON.parse(readFileSync(join(root, `${name}-D`, 'batch.json'), 'utf8'));
    const plan = batch.image_plan?.images ?? {};
    let offDigest = 0;
    let completed = 0;
    for (const job of readdirSync(join(root, `${name}-D`, 'jobs'))) {
      const receipt = JSON.parse(readFileSync(join(root, `${name}-D`, 'jobs', job, 'receipt.json'), 'utf8'));
      const result = JSON.parse(readFileSync(join(root, `${name}-D`, 'jobs', job, 'result.json'), 'utf8'));
      if (result.classification === 'completed') completed += 1;
      if (batch.image_plan !== undefined && receipt.image_id !== plan[receipt.image]?.ref) offDigest += 1;
    }
    // The registry's access log for this run: the engine's manifest GETs by digest (user agent docker/…) from the
    // second of the first pull on (start's resolution also GETs each manifest once, before it; its size reads are ours).
    const firstPull = journal.find((e) => e.type === 'image' && e.action === 'pull_started');
    const from = firstPull === undefined ? Infinity : Math.floor(Date.parse(firstPull.at) / 1000) * 1000;
    const months = {
      Jan: 0,
      Feb: 1,
      Mar: 2,
      Apr: 3,
      May: 4,
      Jun: 5,
      Jul: 6,
      Aug: 7,
      Sep: 8,
      Oct: 9,
      Nov: 10,
      Dec: 11,
    };
    const registryPulls = readFileSync(join(root, 'registry.log'))
      .subarray(logFrom)
      .toString('utf8')
      .split('\n')
      .filter((l) => {
        const m =
          /\[(\d+)\/(\w+)\/(\d+):(\d+):(\d+):(\d+) \+0000\] "GET \/v2\/[^ ]+\/manifests\/sha256:/.exec(l);
        if (m === null || !l.includes('"docker/')) return false;
        const [, d, mon, y, h, mi, sec] = m;
        return Date.UTC(Number(y), months[mon], Number(d), Number(h), Number(mi), Number(sec)) >= from;
      }).length;
    // What the engine really downloaded: each image's own random layer (MIN..MAX MiB, incompressible; the shared layers
    // are 4 MiB and the pair driver's smaller) is fetched once per pull of it, and never by start's resolution.
    const layerFetches = new Map();
    for (const l of readFileSync(join(root, 'registry.log')).subarray(logFrom).toString('utf8').split('\n')) {
      const m = /"GET \/v2\/([^ ]+)\/blobs\/sha256:[0-9a-f]+ HTTP\/1\.1" 200 (\d+)/.exec(l);
      if (m !== null && l.includes('"docker/') && Number(m[2]) >= MIN * 2 ** 20)
        layerFetches.set(m[1], (layerFetches.get(m[1]) ?? 0) + 1);
    }
    return {
      layerFetches: [...layerFetches.values()].reduce((a, n) => a + n, 0),
      maxLayerFetches: Math.max(0, ...layerFetches.values()),
      code,
      seconds,
      peak,
      pulls: count('pulled'),
      evictions: count('evicted'),
      waited,
      waits,
      twice: twice.size,
      offDigest,
      completed,
      registryPulls,
      planned: Object.keys(plan).length,
    };
  };
  const present = [];
  const planned = [];
  const load = () =>
    loadavg()
      .map((l) => l.toFixed(2))
      .join(' ');
  console.log(`load average at start: ${load()}`);
  const runPresent = async (r) => {
    for (const ref of refs) execFileSync('docker', ['pull', '-q', ref], { stdio: 'ignore' });
    const a = await run(`present${r}`, { max_workers: 1 });
    present.push(a.seconds);
    console.log(
      `round ${r} all present: ${a.seconds.toFixed(1)} s (exit ${a.code}), ${a.completed}/${JOBS} completed, registry manifest GETs ${a.registryPulls}, load ${load()}`,
    );
    removeImages();
  };
  const runPlanned = async (r) => {
    removeImages();
    const b = await run(`planned${r}`, { max_workers: 1, image_disk_bytes: budget, image_pulls: 2 });
    planned.push(b.seconds);
    console.log(
      `round ${r} pulled ahead: ${b.seconds.toFixed(1)} s (exit ${b.code}), ${b.completed}/${JOBS} completed, ${b.planned} images in the plan, pairs off the frozen digest ${b.offDigest}, peak store ${(b.peak / 2 ** 20).toFixed(0)} MiB of ${(budget / 2 ** 20).toFixed(0)} (${b.peak <= budget ? 'never above' : 'ABOVE'}), ${b.pulls} pulls (journal), ${b.registryPulls} manifest GETs by digest (registry log, from the second of the first pull: start's resolution may share it), ${b.layerFetches} fetches of the images' own layers (at most ${b.maxLayerFetches} per image), ${b.evictions} evictions, images pulled twice without an eviction between ${b.twice}, ${b.waits} waits ${(b.waited / 1000).toFixed(1)} s in all, load ${load()}`,
    );
    removeImages();
  };
  for (let r = 0; r < ROUNDS; r += 1) {
    if (r % 2 === 0) {
      await runPresent(r);
      await runPlanned(r);
    } else {
      await runPlanned(r);
      await runPresent(r);
    }
  }
  console.log(
    `median makespan: all present ${median(present).toFixed(1)} s, pulled ahead ${median(planned).toFixed(1)} s, ratio ${(median(planned) / median(present)).toFixed(3)}; load average at end: ${load()}`,
  );
} finally {
  registry.kill('SIGKILL');
  removeImages();
  rmSync(root, { recursive: true, force: true });
}
