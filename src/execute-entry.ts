/**
 * oclif's `execute`, as bin/run.js loads it: from the bundle (scripts/bundle-cli.js), where oclif and what it needs
 * are one chunk shared with the commands, instead of the hundred files of node_modules/@oclif/core and its
 * dependencies resolved one by one at every start (issue 39, docs/benchmarks.md "start-up").
 */
export { execute } from '@oclif/core/execute';
