import { EngineError } from '../../app/ports/engine-error.js';
import { userCommand } from '../user-command.js';

interface DockerodeLikeError {
  statusCode?: number;
  code?: string;
  json?: { message?: string } | null;
  reason?: string;
  message?: string;
}

export function engineMessageOf(err: unknown): string {
  const e = err as DockerodeLikeError;
  return e?.json?.message ?? e?.message ?? String(err);
}

export function statusOf(err: unknown): number | null {
  const s = (err as DockerodeLikeError)?.statusCode;
  return typeof s === 'number' ? s : null;
}

const UNAVAILABLE_CODES = new Set(['ECONNREFUSED', 'ENOENT', 'EACCES', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT']);

/** Map any dockerode failure to an EngineError (idempotent on EngineError). */
export function toEngineError(err: unknown, action: string, subject?: string): EngineError {
  if (err instanceof EngineError) return err;
  const status = statusOf(err);
  const text = engineMessageOf(err);
  const code = (err as DockerodeLikeError)?.code;
  if (status === null && code !== undefined && UNAVAILABLE_CODES.has(code)) {
    return new EngineError(
      'engine_unavailable',
      `Docker engine unreachable while trying to ${action} (${code})`,
      {
        statusCode: null,
        engineMessage: text,
        cause: err,
        suggestions: [
          'start the engine (see README: `npm run demo` starts one on a fresh machine)',
          'check DOCKER_HOST',
        ],
      },
    );
  }
  const name = (err as { name?: string })?.name;
  if (status === null && (name === 'TimeoutError' || name === 'AbortError' || code === 'ABORT_ERR')) {
    return new EngineError('engine_error', `Docker engine did not answer in time while trying to ${action}`, {
      statusCode: null,
      engineMessage: `timed out: ${action}`,
      cause: err,
    });
  }
  if (status === 404 && /no such image/i.test(text)) {
    return new EngineError(
      'image_missing',
      `image ${subject ?? ''} is not present on this engine: ${text}`.replace('  ', ' '),
      {
        statusCode: status,
        engineMessage: text,
        cause: err,
        suggestions: [
          `\`docker build -t ${subject ?? 'IMAGE'} <folder>\`, \`docker pull\` or \`docker load\` the image`,
          `the synthetic images of this checkout: \`${userCommand()} images build\``,
        ],
      },
    );
  }
  if (/could not select device driver "?nvidia"?/i.test(text)) {
    return new EngineError(
      'nvidia_runtime_missing',
      `GPU requested but the engine has no NVIDIA runtime: ${text}`,
      {
        statusCode: status,
        engineMessage: text,
        cause: err,
        suggestions: [
          'install nvidia-container-toolkit and restart dockerd',
          'or remove `gpus` from the job',
        ],
      },
    );
  }
  if (/port is already allocated|address already in use/i.test(text)) {
    return new EngineError('port_allocated', `a published port is already in use: ${text}`, {
      statusCode: status,
      engineMessage: text,
      cause: err,
      suggestions: [
        'free the port or give the job other ports (ports must be disjoint across jobs and batches)',
      ],
    });
  }
  return new EngineError('engine_error', `Docker engine error while trying to ${action}: ${text}`, {
    statusCode: status,
    engineMessage: text,
    cause: err,
  });
}
