/**
 * Image builds through the serve API (issue 23), the pure part: which base images a Dockerfile needs (the engine
 * has no registry: every one must already be present), what a build's cache key is, and which tags a caller may
 * set.
 */

/** The label that carries a build's cache key on the image it produced. */
export const BUILD_KEY_LABEL = 'roboguide.build.sha256';

/** Our own images (the pair driver, the synthetic images): a caller's build never takes their tags. */
export const RESERVED_TAG_PREFIX = 'roboguide/';

const COMPONENT = '[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*';
const TAG_PART = '[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}';
const REFERENCE = new RegExp(
  `^(?:[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::[0-9]+)?/)?${COMPONENT}(?:/${COMPONENT})*(?::${TAG_PART})?$`,
);

const DIGEST = '[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}';
const PINNED = new RegExp(`${REFERENCE.source.slice(0, -1)}(?:@${DIGEST})?$`);
const IMAGE_ID = /^(?:sha256:[0-9a-f]{64}|[0-9a-f]{12,64})$/;

/**
 * True when `ref` is something the engine can look an image up by: `[host[:port]/]name[:tag][@digest]` (the
 * distribution grammar, lower-case name, at most 255 characters of name) or an image id (`sha256:…`, or 12 to 64
 * hex digits). Anything else (spaces, control characters, upper case in the name) the engine would refuse.
 */
export function isImageReference(ref: string): boolean {
  if (ref.length > 512) return false;
  if (IMAGE_ID.test(ref)) return true;
  const at = ref.indexOf('@');
  const named = at >= 0 ? ref.slice(0, at) : ref;
  const name =
    named.lastIndexOf(':') > named.lastIndexOf('/') ? named.slice(0, named.lastIndexOf(':')) : named;
  return name.length <= 255 && PINNED.test(ref);
}

/** `name[:tag]` with `:latest` added when no tag is given; null when it is not an image reference. */
export function normalizeTag(
  tag: string,
): { readonly repo: string; readonly tag: string; readonly ref: string } | null {
  if (tag.length > 255 || !REFERENCE.test(tag)) return null;
  const slash = tag.lastIndexOf('/');
  const colon = tag.lastIndexOf(':');
  const [repo, version] = colon > slash ? [tag.slice(0, colon), tag.slice(colon + 1)] : [tag, 'latest'];
  return { repo, tag: version, ref: `${repo}:${version}` };
}

/** `ref` as the engine stores it: Docker Hub's `docker.io/`, `index.docker.io/` and `library/` prefixes removed. */
export function canonicalRef(ref: string): string {
  let out = ref;
  for (;;) {
    const lower = out.toLowerCase();
    const prefix = ['docker.io/', 'index.docker.io/', 'registry-1.docker.io/', 'library/'].find((p) =>
      lower.startsWith(p),
    );
    if (prefix === undefined) return out;
    out = out.slice(prefix.length);
  }
}

/** Why a caller may not use `ref` as a build's tag, or null (compared as the engine stores it, any case). */
export function reservedTagRule(ref: string): string | null {
  return canonicalRef(ref).toLowerCase().startsWith(RESERVED_TAG_PREFIX)
    ? `tags under ${RESERVED_TAG_PREFIX} (also as docker.io/${RESERVED_TAG_PREFIX}…) are reserved for the tool's own images`
    : null;
}

/** A URL or git remote as an ADD source (the daemon would fetch it from the host's network). */
const REMOTE_SOURCE = /^(?:[a-z][a-z0-9+.-]*:\/\/|git@|[^/\s]+@[^/\s]+:)/i;

/**
 * What a caller's Dockerfile may not do, each with its line: parser directives (`# escape=`, `# syntax=`,
 * `# check=`: they change how the file is read), `ADD` of a URL or git remote (fetched by the daemon from the host's
 * network whatever the build's network), and `LABEL roboguide.*` (our own labels).
 */
export function dockerfileRuleIssues(text: string): { path: string; rule: string }[] {
  const issues: { path: string; rule: string }[] = [];
  const lines = text.split(/\r?\n/);
  for (const [i, raw] of lines.entries()) {
    const m = /^\s*#\s*([A-Za-z]+)\s*=/.exec(raw);
    if (m === null) {
      if (/^\s*#/.test(raw) || raw.trim() === '') continue;
      break;
    }
    issues.push({
      path: 'dockerfile',
      rule: `line ${i + 1}: parser directives (# ${m[1]}=) are not accepted in a build through the serve API`,
    });
  }
  for (const line of instructions(text)) {
    const [keyword = '', ...rest] = line.split(/\s+/);
    const word = keyword.toUpperCase();
    if (word === 'ADD') {
      let operands = rest.filter((r) => !r.startsWith('--'));
      if (operands[0]?.startsWith('[')) {
        try {
          operands = (JSON.parse(rest.filter((r) => !r.startsWith('--')).join(' ')) as unknown[]).map(String);
        } catch {
          operands = operands.map((o) => o.replace(/^\[?\s*"?|"?\s*,?\]?$/g, ''));
        }
      }
      if (operands.slice(0, -1).some((src) => REMOTE_SOURCE.test(src.replace(/^["']/, ''))))
        issues.push({
          path: 'dockerfile',
          rule: `${line}: ADD of a URL or git remote is refused (the engine would fetch it from the host's network); COPY files from the context instead`,
        });
    } else if (word === 'LABEL' && /(?:^|\s)["']?roboguide\./i.test(rest.join(' '))) {
      issues.push({ path: 'dockerfile', rule: `${line}: labels under roboguide. are reserved for the tool` });
    }
  }
  return issues;
}

/** A `dockerfile` query parameter: a relative path inside the context, without `..`; normalized (no `./`). */
export function normalizeDockerfilePath(path: string): string | null {
  if (path === '' || path.startsWith('/') || path.includes('\0') || path.includes('\\')) return null;
  const parts = path.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.length === 0 || parts.includes('..')) return null;
  return parts.join('/');
}

/** Joins continuation lines and drops comments and blank lines (a Dockerfile's own escape `\`). */
function instructions(text: string): string[] {
  const out: string[] = [];
  let current = '';
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trimEnd();
    if (current === '' && /^\s*#/.test(line)) continue;
    if (line.endsWith('\\')) {
      current += `${line.slice(0, -1)} `;
      continue;
    }
    current += line;
    if (current.trim() !== '') out.push(current.trim());
    current = '';
  }
  if (current.trim() !== '') out.push(current.trim());
  return out;
}

function substitute(value: string, args: ReadonlyMap<string, string>): string {
  return value.replace(
    /\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)/g,
    (_m, braced?: string, fallback?: string, bare?: string) => {
      const name = braced ?? bare ?? '';
      const v = args.get(name);
      return v !== undefined && v !== '' ? v : (fallback ?? '');
    },
  );
}

/**
 * The images a Dockerfile builds FROM, in order, without `scratch` and without earlier stages named by `AS`
 * (ARG defaults before the first FROM are substituted). Also `COPY --from=IMAGE` sources that are not stages.
 */
export function baseImages(dockerfile: string): string[] {
  const args = new Map<string, string>();
  const stages = new Set<string>();
  const images: string[] = [];
  const add = (image: string): void => {
    const lower = image.toLowerCase();
    if (
      image === '' ||
      lower === 'scratch' ||
      stages.has(lower) ||
      /^\d+$/.test(image) ||
      images.includes(image)
    )
      return;
    images.push(image);
  };
  let seenFrom = false;
  for (const line of instructions(dockerfile)) {
    const [keyword = '', ...rest] = line.split(/\s+/);
    const word = keyword.toUpperCase();
    if (word === 'ARG' && !seenFrom) {
      for (const decl of rest) {
        const eq = decl.indexOf('=');
        if (eq > 0) args.set(decl.slice(0, eq), decl.slice(eq + 1).replace(/^["']|["']$/g, ''));
      }
    } else if (word === 'FROM') {
      seenFrom = true;
      const operands = rest.filter((r) => !r.startsWith('--'));
      const image = substitute(operands[0] ?? '', args);
      add(image);
      if (operands[1]?.toUpperCase() === 'AS' && operands[2] !== undefined)
        stages.add(operands[2].toLowerCase());
    } else if (word === 'COPY') {
      const from = rest.find((r) => r.startsWith('--from='));
      if (from !== undefined) add(substitute(from.slice('--from='.length), args));
    }
  }
  return images;
}
