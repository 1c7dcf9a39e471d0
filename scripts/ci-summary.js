#!/usr/bin/env node
// CI's last words on a vitest JSON report (`.ci/run`): the counts, then every failed test by file and name with the
// first lines of its error, then every test that passed only on its retry (CI runs each test at most twice, see
// docs/testing.md) with the error of the attempt that failed. A flake is named at the end of the log, never hidden.
//   node scripts/ci-summary.js LABEL REPORT.json
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';

const [label, file] = process.argv.slice(2);
if (!label || !file) {
  console.error('usage: node scripts/ci-summary.js LABEL REPORT.json');
  process.exit(2);
}
const report = JSON.parse(readFileSync(file, 'utf8'));
const failed = [];
const flaky = [];
for (const result of report.testResults) {
  const path = relative(process.cwd(), result.name);
  for (const test of result.assertionResults) {
    if (test.status === 'failed') failed.push({ path, test });
    else if (test.status === 'passed' && test.failureMessages.length > 0) flaky.push({ path, test });
  }
  // A file that failed outside any test (an import error, a hook) has no failed test to name.
  if (result.status === 'failed' && !result.assertionResults.some((t) => t.status === 'failed')) {
    failed.push({ path, test: { fullName: '(the file itself)', failureMessages: [result.message ?? ''] } });
  }
}
const skipped = report.numPendingTests + report.numTodoTests;
console.log(`${label}: ${report.numPassedTests} passed, ${report.numFailedTests} failed, ${skipped} skipped`);
const firstLines = (message) =>
  String(message ?? '')
    .split('\n')
    .filter((line) => line.trim() !== '')
    .slice(0, 4)
    .map((line) => `      ${line.slice(0, 300)}`)
    .join('\n');
for (const { path, test } of failed) {
  // The first attempt's error is the cause; a retry's may only be what the first attempt left behind.
  const [first, last] = [test.failureMessages[0], test.failureMessages.at(-1)];
  const retry =
    test.failureMessages.length > 1 && last !== first ? `\n    and on its retry:\n${firstLines(last)}` : '';
  console.log(`  FAILED ${path} > ${test.fullName}\n${firstLines(first)}${retry}`);
}
for (const { path, test } of flaky) {
  console.log(
    `  PASSED ON RETRY (a flake to fix) ${path} > ${test.fullName}\n${firstLines(test.failureMessages[0])}`,
  );
}
