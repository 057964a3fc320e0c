# Sourced by the benchmark scripts. kill_tree PID: ends PID and every process below it, found by
# their parent PIDs in /proc: only what this script started, never a process of the same name
# that someone else runs.
kill_tree() {
  local pid=$1 child
  for child in $(cat /proc/"$pid"/task/*/children 2>/dev/null); do kill_tree "$child"; done
  kill "$pid" 2>/dev/null || true
}
