/**
 * `PairDriverContainer`: the synthetic pair driver (`docker/pair-driver`) as a testcontainers module. Built here from
 * the package's `docker/` folder when the engine lacks it, never pulled; no network by default; the driver's actions
 * (`/opt/driver/run ACTION…`, see docker/pair-driver/run) as typed builder methods; labelled with its owner so the
 * kit's sweep removes it when the suite that started it was killed; `stop()` confirms the engine's 404.
 */
import type Docker from 'dockerode';
import {
  AbstractStartedContainer,
  GenericContainer,
  type StartedTestContainer,
  type StopOptions,
  type StoppedTestContainer,
} from 'testcontainers';
import { Dockerode } from '../adapters/docker/dockerode.js';
import { PAIR_DRIVER_IMAGE } from '../core/synthetic-images.js';
import { buildPairDriverImage } from './images.js';
import { sweepOnce, testKitOwner, TESTKIT_LABEL, TESTKIT_OWNER_LABEL } from './leftovers.js';

/** What `outcome=KIND` writes to the outcome file (`$ROBOGUIDE_OUTCOME_PATH`, default /tmp/outcome.json). */
export type DriverOutcome =
  | 'completed'
  | 'infra'
  | 'fatal'
  | 'wrong_job'
  | 'invalid_json'
  | 'not_object'
  | 'provider_stop'
  | { readonly providerStatus: number };

/** The Codex-style session file `session=KIND` writes under `$SESSIONS_DIR` (default /root/.codex/sessions). */
export type DriverSession =
  | '429'
  | '429camel'
  | 'success'
  | 'fail_then_success'
  | 'malformed'
  | 'payload_type_array'
  | { readonly echoEnv: string };

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const OUTCOMES = new Set([
  'completed',
  'infra',
  'fatal',
  'wrong_job',
  'invalid_json',
  'not_object',
  'provider_stop',
]);
const SESSIONS = new Set([
  '429',
  '429camel',
  'success',
  'fail_then_success',
  'malformed',
  'payload_type_array',
]);

function refuse(method: string, rule: string, value: unknown): never {
  throw new RangeError(`PairDriverContainer.${method}: ${rule} (got ${JSON.stringify(value)})`);
}
function integer(method: string, value: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (!Number.isInteger(value) || value < min || value > max)
    refuse(method, `must be an integer from ${min} to ${max}`, value);
  return value;
}
/** The driver `eval`s the names it echoes: only plain variable names reach it. */
function envName(method: string, name: string): string {
  if (!ENV_NAME.test(name))
    refuse(method, 'must be a variable name (letters, digits, _; not starting with a digit)', name);
  return name;
}

export class PairDriverContainer extends GenericContainer {
  readonly #actions: string[] = [];
  #commandSet = false;
  #labels: Record<string, string> = {};

  /** `image`: another tag of the synthetic driver (default `roboguide/pair-driver:1`, built when missing). */
  constructor(image: string = PAIR_DRIVER_IMAGE) {
    super(image);
    this.withNetworkMode('none');
    this.withPullPolicy({ shouldPull: () => 'never' });
  }

  #act(action: string): this {
    this.#actions.push(action);
    return this;
  }

  /** `outcome=KIND`: write the outcome file (a result the tool classifies). */
  withOutcome(outcome: DriverOutcome): this {
    if (typeof outcome === 'object')
      return this.#act(`outcome=provider_status=${integer('withOutcome', outcome.providerStatus, 100, 599)}`);
    if (!OUTCOMES.has(outcome))
      refuse('withOutcome', `must be one of ${[...OUTCOMES].join(', ')} or {providerStatus}`, outcome);
    return this.#act(`outcome=${outcome}`);
  }
  /** `usage=MIB`: the next outcome reports both arms measured, with this peak GPU memory. */
  withUsage(peakGpuMib: number): this {
    return this.#act(`usage=${integer('withUsage', peakGpuMib, 0)}`);
  }
  /** `arm=VERDICT`: the next outcome's arm A verdict (default `rejected`). */
  withArmVerdict(verdict: string): this {
    if (!/^[A-Za-z0-9_-]+$/.test(verdict))
      refuse('withArmVerdict', 'must be letters, digits, _ or -', verdict);
    return this.#act(`arm=${verdict}`);
  }
  /** `session=KIND`: write a Codex-style session file. */
  withSession(session: DriverSession): this {
    if (typeof session === 'object')
      return this.#act(`session=echo_env=${envName('withSession', session.echoEnv)}`);
    if (!SESSIONS.has(session))
      refuse('withSession', `must be one of ${[...SESSIONS].join(', ')} or {echoEnv}`, session);
    return this.#act(`session=${session}`);
  }
  /** `echo_env=NAME`: print the variable raw, base64, split across writes and in an Authorization header. */
  withSecretEcho(name: string): this {
    return this.#act(`echo_env=${envName('withSecretEcho', name)}`);
  }
  /** `fake_secrets`: print well-known fake token shapes on stdout and stderr. */
  withFakeSecrets(): this {
    return this.#act('fake_secrets');
  }
  /** `print_env=NAME`: print NAME=value of one public variable. */
  withPrintEnv(name: string): this {
    return this.#act(`print_env=${envName('withPrintEnv', name)}`);
  }
  /** `env`: print the names (not values) of the environment, one a line. */
  withEnvNames(): this {
    return this.#act('env');
  }
  /** `gpu_env`: print NVIDIA_VISIBLE_DEVICES. */
  withGpuEnv(): this {
    return this.#act('gpu_env');
  }
  /** `stdout_bytes=N` / `stderr_bytes=N`: N bytes of 64-byte lines; `big: true` writes 1 MiB at a time (`big_stdout=N`). */
  withOutputBytes(
    stream: 'stdout' | 'stderr',
    bytes: number,
    options: { readonly big?: boolean } = {},
  ): this {
    if (stream !== 'stdout' && stream !== 'stderr')
      refuse('withOutputBytes', 'stream must be stdout or stderr', stream);
    const n = integer('withOutputBytes', bytes, 0);
    return this.#act(options.big === true ? `big_${stream}=${n}` : `${stream}_bytes=${n}`);
  }
  /** `numbered=N` (or `numbered_slow=N`, one line every 0.2 s): N numbered 64-byte lines on stdout. */
  withNumberedLines(count: number, options: { readonly slow?: boolean } = {}): this {
    return this.#act(
      `${options.slow === true ? 'numbered_slow' : 'numbered'}=${integer('withNumberedLines', count, 0)}`,
    );
  }
  /** `count`: append "JOB PID" to `$DRIVER_COUNTER` (default ./driver-runs.log): the run-once proof. */
  withRunCount(): this {
    return this.#act('count');
  }
  /** `sleep=SECONDS`. */
  withSleep(seconds: number): this {
    if (!Number.isFinite(seconds) || seconds < 0)
      refuse('withSleep', 'must be a number of seconds ≥ 0', seconds);
    return this.#act(`sleep=${seconds}`);
  }
  /** `ignore_term`: ignore SIGTERM from now on (a driver that outlives its stop budget). */
  withIgnoreTerm(): this {
    return this.#act('ignore_term');
  }
  /** `hang`: run until stopped (a container to exec into, or a pair that never ends). */
  withHang(): this {
    return this.#act('hang');
  }
  /** `exit=N`: exit with N (the actions after it never run). */
  withExitCode(code: number): this {
    return this.#act(`exit=${integer('withExitCode', code, 0, 255)}`);
  }
  /** The job id the driver writes into its outcome (`ROBOGUIDE_JOB_ID`). */
  withJobId(jobId: string): this {
    return this.withEnvironment({ ROBOGUIDE_JOB_ID: jobId });
  }
  /** Run a busybox `sh -c` script instead of the driver: a hostile or special pair. */
  withScript(script: string): this {
    return this.withCommand(['/bin/sh', '-c', script]);
  }

  override withCommand(command: string[]): this {
    this.#commandSet = true;
    return super.withCommand(command);
  }
  override withLabels(labels: Record<string, string>): this {
    this.#labels = { ...this.#labels, ...labels };
    return super.withLabels(labels);
  }

  /** The command the container will run: the driver with the actions given, or the image's default. */
  command(): string[] | undefined {
    if (this.#commandSet) return this.createOpts.Cmd;
    return this.#actions.length > 0 ? ['/opt/driver/run', ...this.#actions] : undefined;
  }

  override async start(): Promise<StartedPairDriverContainer> {
    const docker = new Dockerode();
    await sweepOnce();
    const image = this.imageName.string;
    if (image === PAIR_DRIVER_IMAGE && (await imageMissing(docker, image)))
      await buildPairDriverImage({ docker });
    if (!this.#commandSet && this.#actions.length > 0)
      super.withCommand(['/opt/driver/run', ...this.#actions]);
    super.withLabels({
      ...this.#labels,
      [TESTKIT_LABEL]: 'pair-driver',
      [TESTKIT_OWNER_LABEL]: JSON.stringify(await testKitOwner()),
    });
    try {
      return new StartedPairDriverContainer(await super.start(), docker);
    } catch (err) {
      throw await explainReaperFailure(docker, err);
    }
  }
}

async function imageMissing(docker: Docker, image: string): Promise<boolean> {
  try {
    await docker.getImage(image).inspect();
    return false;
  } catch (err) {
    if ((err as { statusCode?: number }).statusCode === 404) return true;
    throw err;
  }
}

/** testcontainers starts its reaper (Ryuk) first; where that image can be neither found nor pulled, say what to do. */
async function explainReaperFailure(docker: Docker, err: unknown): Promise<unknown> {
  if (process.env['TESTCONTAINERS_RYUK_DISABLED'] === 'true') return err;
  const ryuk = process.env['RYUK_CONTAINER_IMAGE'] ?? 'testcontainers/ryuk:0.14.0';
  if (!(await imageMissing(docker, ryuk).catch(() => false))) return err;
  return new Error(
    `testcontainers could not start its reaper (Ryuk): the image ${ryuk} is not on this engine and could not be pulled ` +
      `(${(err as Error).message}). Set TESTCONTAINERS_RYUK_DISABLED=true: the kit's label sweep then removes what a killed suite leaves (docs/testing.md).`,
    { cause: err },
  );
}

export class StartedPairDriverContainer extends AbstractStartedContainer {
  readonly #docker: Docker;

  constructor(started: StartedTestContainer, docker: Docker) {
    super(started);
    this.#docker = docker;
  }

  /** The engine's view of the container (`HostConfig.NetworkMode`, `State`, `Config.Labels`…). */
  inspect(): Promise<Docker.ContainerInspectInfo> {
    return this.#docker.getContainer(this.getId()).inspect();
  }

  /** Wait for the driver to exit (at most `timeoutMs`); its exit code. */
  async waitForExit(timeoutMs = 60_000): Promise<number> {
    const wait = this.#docker.getContainer(this.getId()).wait() as Promise<{ StatusCode: number }>;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`container ${this.getId()} still running after ${timeoutMs} ms`)),
        timeoutMs,
      );
    });
    try {
      return (await Promise.race([wait, timeout])).StatusCode;
    } finally {
      clearTimeout(timer);
    }
  }

  /** What the container wrote so far, stdout and stderr apart. */
  async output(): Promise<{ stdout: string; stderr: string }> {
    const raw = await this.#docker
      .getContainer(this.getId())
      .logs({ stdout: true, stderr: true, follow: false });
    const out = { stdout: '', stderr: '' };
    // The multiplexed log: 8-byte frames (stream type, 0, 0, 0, big-endian length) then the payload.
    for (let at = 0; at + 8 <= raw.length;) {
      const size = raw.readUInt32BE(at + 4);
      const text = raw.subarray(at + 8, at + 8 + size).toString();
      if (raw[at] === 2) out.stderr += text;
      else out.stdout += text;
      at += 8 + size;
    }
    return out;
  }

  /** Stop and remove the container, then confirm the engine answers 404 for it (throws when it does not). */
  override async stop(options: Partial<StopOptions> = {}): Promise<StoppedTestContainer> {
    if (options.remove === false) return super.stop(options);
    let stopped: StoppedTestContainer | undefined;
    let failure: Error | undefined;
    try {
      stopped = await super.stop(options);
    } catch (err) {
      failure = err as Error; // gone already (someone removed it) is what stop wants: decided by the check below
    }
    try {
      await this.inspect();
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode !== 404) throw err;
      return (
        stopped ?? {
          getId: () => this.getId(),
          copyArchiveFromContainer: () => Promise.reject(new Error('the container was removed')),
        }
      );
    }
    throw new Error(
      `container ${this.getId()} is still on the engine after stop()${failure ? `: ${failure.message}` : ''}`,
      { cause: failure },
    );
  }
}
