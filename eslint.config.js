// @ts-check
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/**
 * What a driven adapter may not import: app outside its ports (a regex: gitignore patterns cannot re-include
 * app/ports under an excluded app/), the commands, cli and the composition roots. `allowed`: app modules let
 * through by name.
 */
function drivenAdapterImports(allowed = []) {
  const except = allowed.map((name) => `(?!${name.replaceAll('/', '\\/').replaceAll('.', '\\.')})`).join('');
  return [
    {
      regex: `(^|/)app/(?!ports/)${except}`,
      message:
        'a driven adapter imports src/core and src/app/ports only: move the type or constant it needs there.',
    },
    {
      group: [
        '**/commands/**',
        '**/cli/**',
        '**/composition-root*',
        '**/command-root*',
        '**/serve-root*',
        '**/library*',
      ],
      message: 'a driven adapter is wired by the composition roots; it does not import them or the commands.',
    },
  ];
}

/** No re-exports (issue 44): every import names the file that owns the thing. Only the package entries gather. */
const NO_REEXPORTS = [
  {
    selector: 'ExportAllDeclaration, ExportNamedDeclaration[source]',
    message: 'no re-exports: import the name from the file that owns it (only the package entries gather).',
  },
  {
    selector: 'ExportNamedDeclaration[source=null][declaration=null][specifiers.length>0]',
    message: 'no re-exports: export the declaration where it is written; import a name from its owner.',
  },
];

/**
 * No `mkdir(…, { recursive: true })`: Node's never returns where the system answers ENOENT under an existing folder
 * (anything under /proc); src/adapters/fs/make-dirs.ts makes each level once and throws instead.
 */
const NO_RECURSIVE_MKDIR = {
  selector:
    "CallExpression[callee.name=/^mkdir(Sync)?$/] > ObjectExpression > Property[key.name='recursive'], CallExpression[callee.property.name=/^mkdir(Sync)?$/] > ObjectExpression > Property[key.name='recursive']",
  message:
    'no recursive mkdir (it never returns under /proc): makeDirs / makeDirsSync of src/adapters/fs/make-dirs.ts.',
};

const TIME_MESSAGE =
  'time comes through the Clock port (src/app/ports/clock.ts), injected as deps.clock; core/ takes it as data.';
/** The real timers and clocks, which only src/adapters/system-clock.ts may use. */
const TIME_GLOBALS = [
  'setTimeout',
  'setInterval',
  'setImmediate',
  'clearTimeout',
  'clearInterval',
  'clearImmediate',
  'performance',
].map((name) => ({ name, message: TIME_MESSAGE }));
const TIME_PROPERTIES = [
  { object: 'Date', property: 'now', message: TIME_MESSAGE },
  { object: 'process', property: 'hrtime', message: TIME_MESSAGE },
  { object: 'process', property: 'uptime', message: TIME_MESSAGE },
  { object: 'globalThis', property: 'setTimeout', message: TIME_MESSAGE },
  { object: 'globalThis', property: 'setInterval', message: TIME_MESSAGE },
  { object: 'globalThis', property: 'setImmediate', message: TIME_MESSAGE },
];
/** `new Date()` reads the clock; `new Date(x)` only converts a time it was given. */
const NO_CLOCK_READ = {
  selector: "NewExpression[callee.name='Date'][arguments.length=0]",
  message: TIME_MESSAGE,
};

export default tseslint.config(
  {
    ignores: [
      'dist/**',
      'node_modules/**',
      'coverage/**',
      'bin/**',
      'bench/**/*.js',
      'scripts/**/*.js',
      // Child processes of the tests that run the built code (dist/), as bench/ and scripts/ do.
      'test/support/*.mjs',
      'docker/**',
      'eslint.config.js',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/only-throw-error': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
      'no-restricted-imports': 'off',
    },
  },
  {
    // core/ is pure: no node:*, no dockerode, no fs, no clock.
    files: ['src/core/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['node:*', 'dockerode', 'tar-fs', 'pino', 'fs', 'path', 'child_process'],
              message: 'core/ is pure: take data, return data; do I/O in adapters/.',
            },
          ],
        },
      ],
    },
  },
  {
    // No re-exports (issue 44): every import names the file that owns the thing. Only the package entries (and the
    // bundle's entry for bin/run.js) gather.
    files: ['src/**/*.ts'],
    ignores: ['src/index.ts', 'src/adapters-entry.ts', 'src/execute-entry.ts', 'src/testing/index.ts'],
    rules: {
      'no-restricted-syntax': ['error', ...NO_REEXPORTS, NO_RECURSIVE_MKDIR],
    },
  },
  {
    // Time has one port (src/app/ports/clock.ts, docs/architecture.md "Where time lives"): core/ takes the time as
    // data, app/ reads it and waits through the injected Clock; only src/adapters/system-clock.ts touches the real one.
    files: ['src/core/**/*.ts', 'src/app/**/*.ts'],
    rules: {
      'no-restricted-globals': ['error', ...TIME_GLOBALS],
      'no-restricted-properties': ['error', ...TIME_PROPERTIES],
      'no-restricted-syntax': ['error', ...NO_REEXPORTS, NO_CLOCK_READ, NO_RECURSIVE_MKDIR],
    },
  },
  {
    // Commands are thin: they take their wiring from their process root (src/command-root.ts, supervisor-root,
    // serve-root, metrics-root, image-root; one each: test/unit/commands/process-roots.test.ts), never construct or
    // import an adapter themselves, nor the roots' shared factories (src/composition-root.ts).
    files: ['src/commands/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['**/adapters', '**/adapters/**'],
              message:
                'commands ask their process root (src/command-root.ts) for adapters; only the composition roots and src/cli import src/adapters.',
            },
            {
              group: ['**/composition-root', '**/composition-root.js'],
              message:
                "src/composition-root.ts holds the process roots' shared factories: a command asks its process root (src/command-root.ts, src/serve-root.ts, …).",
            },
          ],
        },
      ],
    },
  },
  {
    // app/ is the use-cases: it imports core/ and its own ports, never the world. Adapters implement the ports and
    // the composition roots wire them in. Node built-ins: only the pure ones app really uses (node:path for path
    // arithmetic, node:crypto for digests and ids, node:stream and node:string_decoder for the redacting log
    // streams, node:events); anything that touches files, processes, the network or the OS goes through a port.
    files: ['src/app/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: [
                '**/adapters/**',
                '**/commands/**',
                '**/cli/**',
                '**/composition-root*',
                '**/command-root*',
                '**/serve-root*',
                '**/library*',
              ],
              message:
                'app/ imports core/ and app/ports only: take the adapter through a port (deps), wired in the composition root.',
            },
            {
              group: [
                'node:*',
                '!node:path',
                '!node:crypto',
                '!node:stream',
                '!node:stream/promises',
                '!node:string_decoder',
                '!node:events',
              ],
              message:
                'app/ does no I/O itself: use a port (FileSystem, HostIdentity, OutcomeReader, SessionTails, ContainerRuntime…).',
            },
            {
              group: [
                'fs',
                'fs/*',
                'child_process',
                'os',
                'net',
                'dockerode',
                'pino',
                'pino/*',
                'pg',
                'pg-*',
                'node:sqlite',
                'tar-*',
                'ssh2',
              ],
              message: 'app/ does no I/O itself: the technology belongs in an adapter behind a port.',
            },
          ],
        },
      ],
    },
  },
  {
    // A driven adapter (engine, registry, files, probes) implements a port: it imports src/core, src/app/ports,
    // other adapters and libraries, never a use-case. The driving adapter src/adapters/http calls the use-cases
    // (src/app/serve) and is left out.
    files: ['src/adapters/**/*.ts'],
    ignores: ['src/adapters/http/**'],
    rules: { 'no-restricted-imports': ['error', { patterns: drivenAdapterImports() }] },
  },
  {
    // No function over 80 lines in src (issue 44), counted as `npm run metrics` counts them (scripts/code-metrics.js):
    // every line from the function's start to its closing brace, blank lines and comments included, a method from its
    // name, an arrow from its parameters, an IIFE like any other function. Split a long one along its seams.
    files: ['src/**/*.ts'],
    rules: {
      'max-lines-per-function': [
        'error',
        { max: 80, skipBlankLines: false, skipComments: false, IIFEs: true },
      ],
    },
  },
  {
    files: ['test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-non-null-assertion': 'off',
    },
  },
);
