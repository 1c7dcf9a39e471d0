import { describe, expect, it } from 'vitest';
import { runtimeIssues } from '../../../src/app/batch/runtime-issues.js';
import { jobRuntime, parseManifest, parsePairSpec } from '../../../src/core/manifest/parse.js';
import {
  gvisorSessionsDirProblem,
  hasNvproxy,
  hasOciSeccomp,
  runtimeProblem,
  type EngineRuntime,
} from '../../../src/core/oci-runtime.js';
import { runtimesCheck } from '../../../src/app/doctor/runtime-checks.js';

const RUNC: EngineRuntime = { name: 'runc', path: 'runc', args: [] };
const RUNSC: EngineRuntime = {
  name: 'runsc',
  path: '/usr/bin/runsc',
  args: ['--network=none', '--oci-seccomp'],
};
const ENGINE = { runtimes: ['runc', 'runsc'], runtimeDetails: [RUNC, RUNSC] };

function manifest(extra: Record<string, unknown>, job: Record<string, unknown> = {}) {
  const parsed = parseManifest(
    JSON.stringify({
      schema: 'roboguide.e1.batch/v0.1',
      image: 'driver:1',
      jobs: [{ job_id: 'a', argv: ['true'], cwd: '/w', outcome_path: '/w/o.json', ...job }],
      ...extra,
    }),
  );
  if (!parsed.ok) throw new Error(JSON.stringify(parsed.issues));
  return parsed.manifest;
}

describe('the runtime field', () => {
  it('is runc when absent (batch-wide and in a pair spec); a job overrides the batch; a bad name is refused naming the field', () => {
    expect(jobRuntime(manifest({}), {})).toBe('runc');
    expect(jobRuntime(manifest({ runtime: 'runsc' }), {})).toBe('runsc');
    const m = manifest({ runtime: 'runsc' }, { runtime: 'runc' });
    expect(jobRuntime(m, m.jobs[0]!)).toBe('runc');
    const spec = parsePairSpec({
      job_id: 'a',
      argv: ['true'],
      cwd: '/w',
      outcome_path: '/w/o.json',
      image: 'i',
      runtime: 'runsc',
    });
    expect(spec.ok && spec.spec.runtime).toBe('runsc');
    const bad = parseManifest(
      JSON.stringify({
        schema: 'roboguide.e1.batch/v0.1',
        image: 'i',
        runtime: 'run sc',
        jobs: [{ job_id: 'a', argv: ['true'], cwd: '/w', outcome_path: '/w/o.json', runtime: '' }],
      }),
    );
    expect(bad.ok).toBe(false);
    if (!bad.ok) expect(bad.issues.map((i) => i.path).sort()).toEqual(['jobs[0].runtime', 'runtime']);
  });

  it("an unregistered runtime names itself and the engine's runtimes; GPUs under gVisor need --nvproxy", () => {
    expect(runtimeProblem('runc', [RUNC, RUNSC], false)).toBeNull();
    expect(runtimeProblem('runsc', [RUNC, RUNSC], false)).toBeNull();
    expect(runtimeProblem('kata', [RUNC, RUNSC], false)).toMatch(
      /runtime "kata" is not registered with the engine \(its runtimes: runc, runsc\)/,
    );
    expect(runtimeProblem('runsc', [RUNC, RUNSC], true)).toMatch(
      /gpus under runtime "runsc" \(gVisor\) need its GPU proxy.*without --nvproxy/,
    );
    expect(
      runtimeProblem('runsc', [RUNC, { ...RUNSC, args: ['--nvproxy', '--oci-seccomp'] }], true),
    ).toBeNull();
    expect(runtimeProblem('runc', [RUNC], true)).toBeNull();
    // gVisor found by its binary under another name
    expect(
      runtimeProblem(
        'gvisor',
        [RUNC, { name: 'gvisor', path: '/usr/local/bin/runsc', args: ['--oci-seccomp'] }],
        true,
      ),
    ).toMatch(/--nvproxy/);
    expect(hasNvproxy(['--nvproxy=true'])).toBe(true);
    expect(hasNvproxy(['--nvproxy=false'])).toBe(false);
  });

  it('gVisor with its root file system in memory is refused (nothing it wrote could be copied out); /tmp sessions too', () => {
    expect(
      runtimeProblem('runsc', [{ ...RUNSC, args: ['--overlay2=root:memory', '--oci-seccomp'] }], false),
    ).toMatch(/in memory.*--overlay2=none/);
    expect(
      runtimeProblem('runsc', [{ ...RUNSC, args: ['--overlay2=none', '--oci-seccomp'] }], false),
    ).toBeNull();
    expect(gvisorSessionsDirProblem('/tmp/sessions')).toMatch(/under \/tmp/);
    expect(gvisorSessionsDirProblem('/root/.codex/sessions')).toBeNull();
  });

  it('gVisor that ignores our seccomp profile (no --oci-seccomp) is refused: a pair could leave a setuid file on the host', () => {
    expect(runtimeProblem('runsc', [{ ...RUNSC, args: ['--network=none'] }], false)).toMatch(
      /runtime "runsc" \(gVisor\) ignores the container's seccomp profile without --oci-seccomp.*runtimeArgs/,
    );
    expect(runtimeProblem('runsc', [{ ...RUNSC, args: ['--oci-seccomp=true'] }], false)).toBeNull();
    expect(hasOciSeccomp(['--oci-seccomp=false'])).toBe(false);
    const check = runtimesCheck({
      id: '',
      version: '20',
      apiVersion: '1.41',
      runtimes: ['runc', 'runsc'],
      runtimeDetails: [RUNC, { ...RUNSC, args: ['--network=none'] }],
    });
    expect(check.status).toBe('warn');
    expect(check.fix).toContain('"--oci-seccomp"');
  });

  it('start: one issue per job at its own field, a batch-wide refusal once, all at once', () => {
    expect(runtimeIssues(manifest({ runtime: 'runsc' }), ENGINE)).toEqual([]);
    expect(runtimeIssues(manifest({ runtime: 'kata' }), ENGINE)).toEqual([
      { path: 'runtime', rule: expect.stringContaining('"kata" is not registered') },
    ]);
    expect(runtimeIssues(manifest({}, { runtime: 'kata' }), ENGINE)).toEqual([
      { path: 'jobs[0].runtime', rule: expect.stringContaining('its runtimes: runc, runsc') },
    ]);
    expect(runtimeIssues(manifest({ runtime: 'runsc' }, { gpus: 1 }), ENGINE)).toEqual([
      { path: 'jobs[0].gpus', rule: expect.stringContaining('--nvproxy') },
    ]);
    expect(runtimeIssues(manifest({ runtime: 'runsc', sessions_dir: '/tmp/s' }), ENGINE)).toEqual([
      { path: 'sessions_dir', rule: expect.stringContaining('/tmp') },
    ]);
    // an engine that reports names only
    expect(runtimeIssues(manifest({ runtime: 'runsc' }), { runtimes: ['runc'] })).toHaveLength(1);
  });

  it('doctor lists the runtimes and says how to register gVisor when it is missing', () => {
    const without = runtimesCheck({
      id: '',
      version: '20',
      apiVersion: '1.41',
      runtimes: ['runc'],
      runtimeDetails: [RUNC],
    });
    expect(without.status).toBe('ok');
    expect(without.detail).toContain('runc');
    expect(without.detail).toContain(
      '{"runtimes":{"runsc":{"path":"/usr/bin/runsc","runtimeArgs":["--oci-seccomp"]}}}',
    );
    expect(without.detail).toContain('restart dockerd');
    const withIt = runtimesCheck({
      id: '',
      version: '20',
      apiVersion: '1.41',
      runtimes: ['runc', 'runsc'],
      runtimeDetails: [RUNC, RUNSC],
    });
    expect(withIt.status).toBe('ok');
    expect(withIt.detail).toContain('runsc (gVisor, no GPUs): /usr/bin/runsc --network=none --oci-seccomp');
    expect(withIt.facts).toEqual({
      runtimes: [
        { name: 'runc', path: 'runc', args: [] },
        { name: 'runsc', path: '/usr/bin/runsc', args: ['--network=none', '--oci-seccomp'] },
      ],
    });
  });
});
