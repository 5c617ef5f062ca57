# Sourced by the launch tests: free_port prints a port below the kernel's ephemeral range (32768
# and up: no outgoing connection of a test running beside this one takes it) with nothing
# listening on it now.
free_port() {
  local p
  for _ in $(seq 50); do
    p=$(( 20000 + RANDOM % 12000 ))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
  echo "$p"
}
