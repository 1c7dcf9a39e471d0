/**
 * What crosses between the registry worker and its caller (worker-registry.ts, registry-worker.ts): calls by method
 * name with plain-data arguments, answers, and errors as data that become the same error classes again (code,
 * message, context, suggestions, exit code, issues, and the cause's code and message), so `isRegistryUnavailable`
 * and every caller's handling see what a registry in the same thread would have thrown.
 */
import {
  InvalidInputError,
  RoboguideError,
  type ErrorCode,
  type ExitCode,
  type Issue,
} from '../../core/errors.js';

export interface WireCall {
  readonly id: number;
  readonly method: string;
  readonly args: readonly unknown[];
}

export type WireAnswer =
  | { readonly id: number; readonly ok: true; readonly value: unknown }
  | { readonly id: number; readonly ok: false; readonly error: WireError };

export interface WireError {
  readonly name: string;
  readonly message: string;
  readonly code?: string;
  readonly context?: Readonly<Record<string, unknown>>;
  readonly suggestions?: readonly string[];
  readonly exitCode?: number;
  readonly issues?: readonly Issue[];
  readonly cause?: WireError;
}

/** Plain data of any value thrown (depth-bounded causes; context kept only when it survives a structured clone). */
export function toWire(err: unknown, depth = 0): WireError {
  if (!(err instanceof Error)) return { name: 'Error', message: String(err) };
  const fields = err as Error & {
    code?: unknown;
    context?: unknown;
    suggestions?: unknown;
    exitCode?: unknown;
    issues?: unknown;
  };
  const cloneable = (value: unknown): boolean => {
    try {
      structuredClone(value);
      return true;
    } catch {
      return false;
    }
  };
  return {
    name: err.name,
    message: err.message,
    ...(typeof fields.code === 'string' ? { code: fields.code } : {}),
    ...(err instanceof RoboguideError && cloneable(err.context) ? { context: err.context } : {}),
    ...(err instanceof RoboguideError ? { suggestions: err.suggestions, exitCode: err.exitCode } : {}),
    ...(err instanceof InvalidInputError ? { issues: err.issues } : {}),
    ...(err.cause !== undefined && depth < 4 ? { cause: toWire(err.cause, depth + 1) } : {}),
  };
}

/** The error again: a RoboguideError (or InvalidInputError) where one was thrown, else an Error with its code. */
export function fromWire(wire: WireError): Error {
  const cause = wire.cause === undefined ? undefined : fromWire(wire.cause);
  const options = {
    ...(cause !== undefined ? { cause } : {}),
    ...(wire.context !== undefined ? { context: wire.context } : {}),
    ...(wire.suggestions !== undefined ? { suggestions: wire.suggestions } : {}),
  };
  if (wire.issues !== undefined && wire.code !== undefined) {
    const invalid = new InvalidInputError(wire.code as ErrorCode, '', [...wire.issues], options);
    // The message as it was composed in the worker (its `shown` lines included).
    Object.defineProperty(invalid, 'message', { value: wire.message, writable: true, configurable: true });
    return invalid;
  }
  if (wire.exitCode !== undefined && wire.code !== undefined)
    return new RoboguideError(wire.code as ErrorCode, wire.message, {
      ...options,
      exitCode: wire.exitCode as ExitCode,
    });
  const plain = new Error(wire.message, cause !== undefined ? { cause } : undefined);
  plain.name = wire.name;
  if (wire.code !== undefined) (plain as Error & { code: string }).code = wire.code;
  return plain;
}
