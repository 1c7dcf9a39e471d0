import { z } from 'zod';
import {
  ArchiveUploadSchema,
  FileUploadSchema,
  HealthSchema,
  ImageBuildEventSchema,
  ImagePresenceSchema,
  PairAcceptedSchema,
  PairStatusSchema,
} from './schemas.js';
import {
  CleanupRecordSchema,
  EgressPolicySchema,
  KeepaliveSchema,
  SessionCreatedSchema,
  SessionCreateSchema,
  SessionDetailSchema,
  SessionListSchema,
} from './session-schemas.js';
import { ErrorSchema } from './error-schema.js';
import { ExecEventSchema, ExecResultSchema, ExecSchema } from './exec-schemas.js';
import { PairSpecSchema } from '../../core/manifest/schema.js';

/** The schemas of `serve`'s OpenAPI document, each from the zod schema that validates it (`z.toJSONSchema`). */
export const COMPONENTS = {
  SessionCreate: [SessionCreateSchema, 'input'],
  SessionCreated: [SessionCreatedSchema, 'output'],
  SessionList: [SessionListSchema, 'output'],
  SessionDetail: [SessionDetailSchema, 'output'],
  Exec: [ExecSchema, 'input'],
  ExecResult: [ExecResultSchema, 'output'],
  ExecEvent: [ExecEventSchema, 'output'],
  CleanupRecord: [CleanupRecordSchema, 'output'],
  Keepalive: [KeepaliveSchema, 'output'],
  EgressPolicy: [EgressPolicySchema, 'input'],
  ArchiveUpload: [ArchiveUploadSchema, 'output'],
  FileUpload: [FileUploadSchema, 'output'],
  PairSpec: [PairSpecSchema, 'input'],
  PairAccepted: [PairAcceptedSchema, 'output'],
  PairStatus: [PairStatusSchema, 'output'],
  Health: [HealthSchema, 'output'],
  ImagePresence: [ImagePresenceSchema, 'output'],
  ImageBuildEvent: [ImageBuildEventSchema, 'output'],
  Error: [ErrorSchema, 'output'],
} as const satisfies Record<string, readonly [z.ZodType, 'input' | 'output']>;

export type ComponentName = keyof typeof COMPONENTS;

export function schemaOf(name: ComponentName): Record<string, unknown> {
  const [schema, io] = COMPONENTS[name];
  const { $schema: _drop, ...json } = z.toJSONSchema(schema, {
    io,
    target: 'draft-2020-12',
    unrepresentable: 'any',
  }) as Record<string, unknown>;
  return json;
}
