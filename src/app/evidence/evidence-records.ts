/**
 * The checks each evidence record is read back through (`EvidenceStore.readJson`): its kind (`schema`) and the types
 * of the fields its readers use. A file that fails is E_STORE (syscall `parse`), as a torn one is.
 */
import { BATCH_SCHEMA } from '../batch/layout.js';
import type { BatchRecord, StopRequest, SupervisorRecord } from '../batch/layout.js';
import type { NodesDownRecord } from '../batch/node-down.js';
import type { WrittenStatus } from '../batch/status.js';
import { STATUS_SCHEMA } from '../../core/batch-state.js';
import { isObject } from '../../core/json-object.js';
import { RECEIPT_SCHEMA, type Receipt } from '../../core/receipt.js';
import { RESULT_SCHEMA, type ResultRecord } from '../../core/result.js';
import { SESSION_SCHEMA, type SessionRecord } from '../serve/session-state.js';
import { taggedRecord } from './json-check.js';

export const isReceipt = taggedRecord<Receipt>(RECEIPT_SCHEMA, [
  'batch_id',
  'job_id',
  'claim_id',
  'container_name',
]);

export const isResultRecord = taggedRecord<ResultRecord>(RESULT_SCHEMA, [
  'job_id',
  'claim_id',
  'classification',
]);

export const isBatchRecord = taggedRecord<BatchRecord>(BATCH_SCHEMA, ['batch_id', 'registry_path']);

export const isWrittenStatus = taggedRecord<WrittenStatus>(STATUS_SCHEMA, ['batch_id', 'state']);

export const isNodesDownRecord = (value: unknown): value is NodesDownRecord =>
  taggedRecord<NodesDownRecord>('roboguide.e1.nodes_down/v1')(value) && Array.isArray(value.nodes);

export const isSessionRecord = taggedRecord<SessionRecord>(SESSION_SCHEMA, [
  'session_id',
  'claim_id',
  'container_name',
]);

export function isSupervisorRecord(value: unknown): value is SupervisorRecord {
  return (
    isObject(value) &&
    typeof value['pid'] === 'number' &&
    typeof value['started_at'] === 'string' &&
    (value['mode'] === 'start' || value['mode'] === 'resume')
  );
}

export function isStopRequest(value: unknown): value is StopRequest {
  return isObject(value) && typeof value['terminate'] === 'boolean';
}
