#!/bin/sh
# The driver of docs/driver.md's example: "evaluates" two arms, then writes the outcome (SPEC §5.2).
# `--forget-flags` writes an outcome without infrastructure_failure/fatal_failure: what a first driver often
# does, and what roboguide-eval names in result.json `outcome_problems`, in status and in the report.
# `--crash` dies half-way with a traceback on stderr and exit code 3, writing no outcome: what a bug in the agent
# looks like, and what status, the report and `pair run` say about it (the exit code and the end of stderr.log).
set -eu
: "${ROBOGUIDE_JOB_ID:?set by roboguide-eval}" "${ROBOGUIDE_OUTCOME_PATH:?set by roboguide-eval}"
echo "evaluating $ROBOGUIDE_JOB_ID in $(pwd) with model ${MODEL:-default}"
# A session file, as a Codex run would leave one (collected into the evidence, secrets masked).
echo '{"type":"session_meta"}' > "/root/.codex/sessions/$ROBOGUIDE_JOB_ID.jsonl"
arms='{"baseline":{"verdict":"pass"},"guided":{"verdict":"pass"}}'
if [ "${1:-}" = "--crash" ]; then
  printf 'Traceback (most recent call last):\n  File "/opt/eval/agent.py", line 42, in <module>\n    score = grade(answer)\nKeyError: %s\n' "'expected'" >&2
  exit 3
fi
if [ "${1:-}" = "--forget-flags" ]; then
  outcome="{\"job_id\":\"$ROBOGUIDE_JOB_ID\",\"arms\":$arms}"
else
  outcome="{\"job_id\":\"$ROBOGUIDE_JOB_ID\",\"infrastructure_failure\":false,\"fatal_failure\":false,\"arms\":$arms}"
fi
# Written whole, then renamed: a driver killed half-way leaves no half-written outcome.
printf '%s\n' "$outcome" > "$ROBOGUIDE_OUTCOME_PATH.tmp"
mv "$ROBOGUIDE_OUTCOME_PATH.tmp" "$ROBOGUIDE_OUTCOME_PATH"
echo "outcome written to $ROBOGUIDE_OUTCOME_PATH"
