// A JSON request body read within limits checked while it arrives: size, nesting depth, number of values, the time
// between two pieces, its media type and UTF-8. Nothing is parsed until every rule has held.
import type { IncomingMessage } from 'node:http';
import { ApiError } from '../../app/serve/api-error.js';

export interface JsonBodyLimits {
  /** Bytes of the whole body; past it: 413 (a declared Content-Length above it is refused before any byte is read). */
  readonly maxBytes: number;
  /** Arrays and objects open at once; past it: 400, without reading on. */
  readonly maxDepth: number;
  /** Values (array elements and object members, counted by their separators and openers); past it: 400. */
  readonly maxValues: number;
  /** The longest wait for the next piece of a body that has not ended; past it: 408. */
  readonly idleTimeoutMs: number;
}

/**
 * Bounds that keep one request's parse and validation far below the event loop's budget (issue 39): 4 MiB of JSON
 * parses in a few tens of milliseconds; deeper or more numerous values are refused before parsing, where a 16 MB
 * body of tiny values once held the loop for seconds.
 */
export const DEFAULT_JSON_LIMITS: JsonBodyLimits = {
  maxBytes: 4 * 1024 * 1024,
  maxDepth: 64,
  maxValues: 16_384,
  idleTimeoutMs: 10_000,
};

const JSON_TYPE = /^application\/(?:[\w.+-]+\+)?json$/;

/** The media type of the request, lower-case, without parameters; '' when none is given. */
export function mediaType(req: IncomingMessage): string {
  return (req.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
}

/** True when the request says it has a body (a Content-Length above 0, or a chunked transfer). */
export function hasBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  if (length !== undefined) return length !== '0';
  return req.headers['transfer-encoding'] !== undefined;
}

const tooLarge = (max: number): ApiError =>
  new ApiError(413, 'E_TOO_LARGE', `the request body is larger than ${max} bytes`, [
    { path: '$', rule: `at most ${max} bytes of JSON (for a large stdin use the streamed exec form)` },
  ]);

/**
 * Depth and value count of JSON text fed piece by piece, outside strings only (a `{` inside a string is text).
 * A scan, not a parse: invalid JSON is left to the parser, which then has a bounded input.
 */
export class JsonShapeScanner {
  #depth = 0;
  #values = 0;
  #inString = false;
  #escaped = false;
  constructor(readonly limits: Pick<JsonBodyLimits, 'maxDepth' | 'maxValues'>) {}

  /** The rule broken by this piece, or null. */
  feed(chunk: Uint8Array): string | null {
    for (const byte of chunk) {
      if (this.#inString) {
        if (this.#escaped) this.#escaped = false;
        else if (byte === 0x5c) this.#escaped = true;
        else if (byte === 0x22) this.#inString = false;
        continue;
      }
      if (byte === 0x22) this.#inString = true;
      else if (byte === 0x7b || byte === 0x5b) {
        this.#depth += 1;
        this.#values += 1;
        if (this.#depth > this.limits.maxDepth)
          return `must not nest arrays and objects more than ${this.limits.maxDepth} deep`;
      } else if (byte === 0x7d || byte === 0x5d) this.#depth -= 1;
      else if (byte === 0x2c) this.#values += 1;
      else continue;
      if (this.#values > this.limits.maxValues)
        return `must hold at most ${this.limits.maxValues} values (array elements and object members)`;
    }
    return null;
  }
}

/** Reads the body with the limits checked on every piece; rejects with the ApiError of the first rule broken. */
function readLimited(req: IncomingMessage, limits: JsonBodyLimits): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let total = 0;
    const scanner = new JsonShapeScanner(limits);
    const finish = (err: ApiError | null): void => {
      clearTimeout(timer);
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('close', onClose);
      if (err === null) resolve(Buffer.concat(chunks));
      else reject(err);
    };
    const onData = (chunk: Buffer): void => {
      total += chunk.length;
      if (total > limits.maxBytes) return finish(tooLarge(limits.maxBytes));
      const broken = scanner.feed(chunk);
      if (broken !== null) return finish(ApiError.invalid('the request body', [{ path: '$', rule: broken }]));
      chunks.push(chunk);
      timer.refresh();
    };
    const onEnd = (): void => finish(null);
    const onError = (): void =>
      finish(new ApiError(400, 'E_REQUEST_INVALID', 'the request body could not be read'));
    const onClose = (): void => {
      if (!req.complete) onError();
    };
    const timer = setTimeout(() => finish(bodyTimeout(limits.idleTimeoutMs)), limits.idleTimeoutMs);
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('close', onClose);
  });
}

/** 408: no byte of a request body for `idleMs` (a `Content-Length` larger than what is sent); JSON and streamed bodies. */
export function bodyTimeout(idleMs: number): ApiError {
  const seconds = idleMs / 1000;
  return new ApiError(408, 'E_BODY_TIMEOUT', `no byte of the request body arrived for ${seconds} s`, [
    { path: '$', rule: `the body must arrive without a pause of ${seconds} s (is Content-Length right?)` },
  ]);
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * The request's JSON body: `{}` when there is none. 415 for a body of another media type, 413 past `maxBytes`
 * (refused on the declared Content-Length before reading), 400 past the depth or value count (refused while
 * reading), for invalid UTF-8 or invalid JSON, 408 when the body stops arriving. An error leaves the rest of the body
 * unread: the server's error answer closes the connection (sendError).
 */
export async function readJson(req: IncomingMessage, limits = DEFAULT_JSON_LIMITS): Promise<unknown> {
  if (hasBody(req)) {
    const type = mediaType(req);
    if (type !== '' && !JSON_TYPE.test(type))
      throw new ApiError(
        415,
        'E_UNSUPPORTED_MEDIA_TYPE',
        `the request body must be JSON, not ${type.slice(0, 100)}`,
        [{ path: 'content-type', rule: 'must be application/json' }],
      );
    const declared = Number(req.headers['content-length'] ?? '0');
    if (declared > limits.maxBytes) throw tooLarge(limits.maxBytes);
  }
  const bytes = await readLimited(req, limits);
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw ApiError.invalid('the request body', [{ path: '$', rule: 'must be UTF-8' }]);
  }
  if (text.trim() === '') return {};
  try {
    return JSON.parse(text) as unknown;
  } catch {
    // The parser's message quotes the input, which may hold a secret: say only that it is not JSON.
    throw new ApiError(400, 'E_REQUEST_INVALID', 'request body is not valid JSON', [
      { path: '$', rule: 'must be JSON' },
    ]);
  }
}
