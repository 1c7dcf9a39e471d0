import { z } from 'zod';
import { AbsolutePath } from '../../core/manifest/fields.js';
import { ENV_NAME_PATTERN } from '../../core/manifest/constants.js';
import { isImageReference } from '../../core/image-build.js';

export const IMAGE_REF_RULE =
  'must be an image reference [HOST[:PORT]/]NAME[:TAG][@DIGEST] (lower-case name, at most 255 characters) or an image id';

/** An image the engine can look up (isImageReference): refused here rather than by the engine. */
export const ImageRef = z
  .string()
  .refine(isImageReference, { error: IMAGE_REF_RULE })
  .meta({ description: 'an image present on the engine (no pulls): NAME[:TAG][@DIGEST] or an image id' });

/**
 * Field schemas of `serve`'s request bodies that are about the container itself: mounts, capabilities to drop,
 * /etc/hosts lines, annotations, secret variable names and container paths (shared by sessions and execs).
 */

export const MountSchema = z.strictObject({
  source: AbsolutePath.meta({
    description: 'host path (must exist; resolved through symlinks before the mount rules apply)',
  }),
  target: AbsolutePath.refine((p) => p !== '/', { error: 'must not be the root directory' }),
  read_only: z.boolean().default(false),
});

/** Linux capabilities a session may drop (`cap_drop`), without the CAP_ prefix; "ALL" drops every one. */
export const LINUX_CAPABILITIES: readonly string[] = [
  'AUDIT_CONTROL',
  'AUDIT_READ',
  'AUDIT_WRITE',
  'BLOCK_SUSPEND',
  'BPF',
  'CHECKPOINT_RESTORE',
  'CHOWN',
  'DAC_OVERRIDE',
  'DAC_READ_SEARCH',
  'FOWNER',
  'FSETID',
  'IPC_LOCK',
  'IPC_OWNER',
  'KILL',
  'LEASE',
  'LINUX_IMMUTABLE',
  'MAC_ADMIN',
  'MAC_OVERRIDE',
  'MKNOD',
  'NET_ADMIN',
  'NET_BIND_SERVICE',
  'NET_BROADCAST',
  'NET_RAW',
  'PERFMON',
  'SETFCAP',
  'SETGID',
  'SETPCAP',
  'SETUID',
  'SYSLOG',
  'SYS_ADMIN',
  'SYS_BOOT',
  'SYS_CHROOT',
  'SYS_MODULE',
  'SYS_NICE',
  'SYS_PACCT',
  'SYS_PTRACE',
  'SYS_RAWIO',
  'SYS_RESOURCE',
  'SYS_TIME',
  'SYS_TTY_CONFIG',
  'WAKE_ALARM',
];

const CAPABILITY_SET = new Set(LINUX_CAPABILITIES);

/** A capability name as the caller wrote it (`NET_RAW`, `CAP_NET_RAW`, `net_raw`, `ALL`), normalized. */
export function capabilityName(name: string): string {
  const upper = name.toUpperCase();
  return upper.startsWith('CAP_') ? upper.slice(4) : upper;
}

export const CapDrop = z
  .array(z.string())
  .superRefine((caps, ctx) => {
    caps.forEach((cap, index) => {
      const name = capabilityName(cap);
      if (name !== 'ALL' && !CAPABILITY_SET.has(name))
        ctx.addIssue({
          code: 'custom',
          message: `${JSON.stringify(cap)} is not a Linux capability (e.g. NET_RAW, CAP_CHOWN, or ALL)`,
          path: [index],
        });
    });
  })
  .meta({
    description:
      'capabilities to drop from the session\'s default set (CHOWN, DAC_OVERRIDE, FOWNER, SETUID, SETGID, KILL); "ALL" drops all. Capabilities can never be added',
  });

const HOSTNAME = /^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$/;
const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;
const IPV6 = /^[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*$/;
const EXTRA_HOST_RULE =
  'must be "NAME:IP" or "NAME:host-gateway" (NAME a host name, IP an IPv4 or IPv6 address)';

/** One `extra_hosts` entry: `name:ip` or `name:host-gateway` (the host, as the engine's default bridge reaches it). */
export function extraHostProblem(entry: string): string | null {
  const at = entry.indexOf(':');
  if (at <= 0) return EXTRA_HOST_RULE;
  const name = entry.slice(0, at);
  const address = entry.slice(at + 1);
  if (!HOSTNAME.test(name)) return EXTRA_HOST_RULE;
  if (address === 'host-gateway' || IPV4.test(address) || IPV6.test(address)) return null;
  return EXTRA_HOST_RULE;
}

export const ExtraHosts = z
  .array(z.string())
  .superRefine((hosts, ctx) => {
    hosts.forEach((entry, index) => {
      const problem = extraHostProblem(entry);
      if (problem !== null) ctx.addIssue({ code: 'custom', message: problem, path: [index] });
    });
  })
  .meta({ description: 'lines added to the container\'s /etc/hosts: "NAME:IP" or "NAME:host-gateway"' });

const ANNOTATION_KEY_RULE =
  'must be 1..255 printable characters without "=" and must not start with "roboguide." (reserved)';

export const Annotations = z
  .record(z.string(), z.string())
  .superRefine((annotations, ctx) => {
    for (const key of Object.keys(annotations)) {
      if (
        key.length === 0 ||
        key.length > 255 ||
        !/^[\x21-\x7e]+$/.test(key) ||
        key.includes('=') ||
        key.toLowerCase().startsWith('roboguide.')
      ) {
        ctx.addIssue({ code: 'custom', message: ANNOTATION_KEY_RULE, path: [key] });
      }
    }
  })
  .meta({
    description:
      "the caller's own metadata, set as container labels verbatim (any key outside roboguide.*, which stays ours)",
  });

export const SecretEnv = z
  .array(z.string().regex(ENV_NAME_PATTERN, { error: 'must be a variable name ([A-Za-z_][A-Za-z0-9_]*)' }))
  .meta({
    description:
      'names whose literal values are secrets even when the name does not look secret (masked in all output, never written to disk); names not present are ignored',
  });

/** Linux's limits on a path (PATH_MAX, with its NUL) and on one of its names (NAME_MAX), in bytes. */
const PATH_MAX_BYTES = 4095;
const NAME_MAX_BYTES = 255;

/**
 * What is wrong with a path in the container (an exec's `cwd`, a file route's `path`), or null: the one rule both
 * use. Beyond Linux's limits the kernel answers ENAMETOOLONG, which is the caller's input, not our fault.
 */
export function containerPathProblem(path: string): string | null {
  if (path === '') return 'must be a non-empty path';
  if (path.includes('\0')) return 'must not contain NUL';
  if (path.includes('\n')) return 'must not contain a newline';
  if (Buffer.byteLength(path) > PATH_MAX_BYTES) return `must be at most ${PATH_MAX_BYTES} bytes (PATH_MAX)`;
  if (path.split('/').some((name) => Buffer.byteLength(name) > NAME_MAX_BYTES))
    return `each name in the path must be at most ${NAME_MAX_BYTES} bytes (NAME_MAX)`;
  return null;
}

/** A path in the container: absolute, or relative to the session's working directory. */
export const ContainerPath = z
  .string()
  .min(1, { error: 'must be a non-empty path' })
  .superRefine((p, ctx) => {
    const problem = p === '' ? null : containerPathProblem(p);
    if (problem !== null) ctx.addIssue({ code: 'custom', message: problem });
  });
