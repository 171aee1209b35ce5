#!/usr/bin/env bash
# The README's test command (`./dev test`) on a busy machine: two processes
# burning a CPU each beside it, as the fault drill of issue 44 ran it. The
# suite must pass there too: no test may hold a quiet machine's timing.
#
#   benchmarks/suite_under_load.sh [pytest args passed to ./dev test]
#
# BURNERS (default 2) sets how many burners; LIMIT_S (default 7200) bounds
# each one's life, so a burner outlives this script by no more than that even
# if the script itself is SIGKILLed. The burners are stopped on any exit
# (trap). Prints the wall time and the suite's exit status, and exits with it.
# Do not run it while others use the machine: it takes two cores for the
# whole suite (about 20 minutes on the 2-core development VM).
set -u
cd "$(dirname "$0")/.." || exit 2

BURNERS=${BURNERS:-2}
LIMIT_S=${LIMIT_S:-7200}
burners=()

stop_burners() {
  local pid
  for pid in "${burners[@]}"; do
    kill "$pid" 2>/dev/null
  done
  for pid in "${burners[@]}"; do
    wait "$pid" 2>/dev/null
  done
  burners=()
}
trap stop_burners EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for _ in $(seq "$BURNERS"); do
  # timeout(1) passes the TERM it is sent on to the loop, and ends it by
  # itself after LIMIT_S.
  timeout "$LIMIT_S" sh -c 'while :; do :; done' &
  burners+=("$!")
done
echo "suite_under_load: ${#burners[@]} CPU burners (pids ${burners[*]}), each at most ${LIMIT_S} s" >&2

started=$(date +%s)
./dev test "$@"
status=$?
wall=$(( $(date +%s) - started ))
stop_burners

printf 'suite_under_load: ./dev test beside %d CPU burners: wall %dm%02ds, exit status %d\n' \
  "$BURNERS" $(( wall / 60 )) $(( wall % 60 )) "$status"
exit "$status"
