#!/usr/bin/env bash
# Checks that the docs' file:line references still point at the code they describe.
#
# A reference is written in a doc as the visible text `src/ipam/store.rs:376`, followed
# on the same line by a comment saying what that line must contain:
#
#   `src/ipam/store.rs:376` <!-- ref: src/ipam/store.rs:376 contains "holder.matches(&c)" -->
#
# For each such comment, line 376 of src/ipam/store.rs must contain the snippet (a plain
# substring; it cannot contain a double quote). Every visible path:line reference to a
# .rs file must have a comment on its line, so no reference goes unchecked.
#
#   scripts/check-refs.sh [--fix] [FILE.md ...]     (default: every .md under docs/)
#
# On a mismatch it says where the snippet is now and exits 1. --fix moves the reference
# (comment and visible text on that line) to the line where the snippet now is: the only
# one, or the nearest to the old line when there are several; a snippet that is gone is
# still an error.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
fix=0
files=()
for arg in "$@"; do
  case $arg in
    --fix) fix=1 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) files+=("$(realpath -m -- "$arg")") ;;
  esac
done
cd "$ROOT"
if ((${#files[@]} == 0)); then
  mapfile -t files < <({ echo README.md; find docs -name '*.md'; } | sort)
fi

REF='<!-- ref: ([^ ]+):([0-9]+) contains "([^"]*)" -->'
VISIBLE='((src|tests|benches|examples)/[A-Za-z0-9_./-]+\.rs):([0-9]+)'
errors=0
checked=0
fixed=0

# A problem, and the lines that explain it. With --fix the first pass only moves
# references; the check that follows reports what is left.
err() { errors=$((errors + 1)); ((fix)) || printf '%s\n' "$*" >&2; }
say() { ((fix)) || printf '%s\n' "$*" >&2; }

for doc in "${files[@]}"; do
  [[ -f $doc ]] || { err "$doc: no such file"; continue; }
  n=0
  while IFS= read -r line || [[ -n $line ]]; do
    n=$((n + 1))
    # The comments on this line.
    declare -A covered=()
    rest=$line
    while [[ $rest =~ $REF ]]; do
      path=${BASH_REMATCH[1]} num=${BASH_REMATCH[2]} snippet=${BASH_REMATCH[3]}
      rest=${rest#*"${BASH_REMATCH[0]}"}
      covered["$path:$num"]=1
      checked=$((checked + 1))
      where="$doc:$n: $path:$num"
      if [[ -z $snippet ]]; then err "$where: empty snippet"; continue; fi
      if [[ ! -f $path ]]; then err "$where: $path does not exist"; continue; fi
      actual=$(sed -n "${num}p" "$path")
      if [[ $actual == *"$snippet"* ]]; then continue; fi
      mapfile -t hits < <(grep -nF -- "$snippet" "$path" | cut -d: -f1)
      if ((${#hits[@]} == 0)); then
        err "$where: line $num does not contain \"$snippet\", and no line of $path does now"
        say "    line $num is: ${actual}"
        continue
      fi
      best=${hits[0]}
      for h in "${hits[@]}"; do
        d=$((h > num ? h - num : num - h)); bd=$((best > num ? best - num : num - best))
        ((d < bd)) && best=$h
      done
      if ((fix)); then
        esc=${path//./\\.}
        sed -i -E "${n}s#(${esc}):${num}([^0-9]|\$)#\\1:${best}\\2#g" "$doc"
        printf '%s: moved to %s:%s (%s)\n' "$where" "$path" "$best" "$snippet"
        fixed=$((fixed + 1))
      else
        err "$where: line $num does not contain \"$snippet\""
        say "    line $num is: ${actual}"
        say "    the snippet is now at line(s): ${hits[*]} (scripts/check-refs.sh --fix moves the reference to $best)"
      fi
    done
    # Visible references without a comment.
    rest=$(sed -E 's/<!-- ref: [^>]*-->//g' <<<"$line")
    while [[ $rest =~ $VISIBLE ]]; do
      ref="${BASH_REMATCH[1]}:${BASH_REMATCH[3]}"
      rest=${rest#*"${BASH_REMATCH[0]}"}
      [[ -n ${covered[$ref]:-} ]] || err "$doc:$n: $ref has no <!-- ref: $ref contains \"...\" --> on its line"
    done
    unset covered
  done <"$doc"
done

if ((fix)); then
  # What --fix could not mend (a snippet that is gone, a reference without a comment)
  # is reported by a plain check of the result.
  exec "$ROOT/scripts/check-refs.sh" "${files[@]}"
fi
if ((errors)); then
  echo "check-refs: $errors problem(s) in $checked reference(s)" >&2
  exit 1
fi
echo "check-refs: $checked reference(s) point at the code they describe"
