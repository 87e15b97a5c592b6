#!/usr/bin/env bash
# Regenerate one file with a command, commit it, and push it to a branch that others push to as well.
#
#   PUSH_BRANCH=main .github/scripts/push-regenerated.sh leaderboard.md -- attune leaderboard
#
# On a rejected push: `git pull --rebase` and regenerate on the new tip (amending the commit when new inputs
# landed meanwhile); when the rebase itself conflicts (someone pushed the same file), abort it, reset to the
# remote tip and regenerate from scratch. Exits 0 when the file is already up to date. Git credentials come from
# the environment (e.g. GIT_CONFIG_COUNT/KEY/VALUE), never from a file written here. Run it in a fresh checkout:
# on a conflict it resets to the remote tip, dropping any other unpushed local commit.
set -euo pipefail

file="${1:?usage: push-regenerated.sh FILE -- COMMAND...}"
shift
if [ "${1:-}" = "--" ]; then shift; fi
if [ "$#" -eq 0 ]; then echo "push-regenerated.sh: no regenerate command given" >&2; exit 2; fi
branch="${PUSH_BRANCH:?PUSH_BRANCH must name the branch to push to}"
attempts="${PUSH_ATTEMPTS:-5}"
backoff="${PUSH_BACKOFF_SECONDS:-2}"
message="${COMMIT_MESSAGE:-chore: regenerate $file}"

changed() {
  ! git diff --quiet HEAD -- "$file" 2>/dev/null || [ -n "$(git ls-files --others --exclude-standard -- "$file")" ]
}

regenerate_and_commit() {  # returns 1 when there is nothing to commit
  "$@"
  if ! changed; then return 1; fi
  git add -- "$file"
  git commit -q -m "$message"
}

if ! regenerate_and_commit "$@"; then
  echo "$file is up to date"
  exit 0
fi
for attempt in $(seq 1 "$attempts"); do
  if git push -q origin "HEAD:refs/heads/$branch"; then
    echo "pushed $file to $branch (attempt $attempt)"
    exit 0
  fi
  echo "push of $file rejected (attempt $attempt of $attempts); pulling with rebase"
  sleep "$((attempt * backoff))"
  if git pull -q --rebase origin "$branch"; then
    if [ "$(git rev-list --count "origin/$branch..HEAD")" -eq 0 ]; then
      # our commit became empty on the new tip: start a fresh one (never amend someone else's commit)
      if ! regenerate_and_commit "$@"; then
        echo "$file is up to date after rebasing"
        exit 0
      fi
    else
      "$@"
      if changed; then
        git add -- "$file"
        git commit -q --amend --no-edit
      fi
    fi
  else
    git rebase --abort 2>/dev/null || true
    git reset -q --hard "origin/$branch"
    if ! regenerate_and_commit "$@"; then
      echo "$file is up to date after rebasing"
      exit 0
    fi
  fi
done
echo "could not push $file to $branch after $attempts attempts" >&2
exit 1
