# Two emulated hosts for the tests/e2e/*dist_hosts* scripts (sourced after mpi_common.sh, not a test itself): network
# namespaces ${ns}a and ${ns}b ("hosta" 10.88.0.1, "hostb" 10.88.0.2), each a veth pair (veth0) to a bridge in a third
# namespace ${ns}br; no default route, so no traffic leaves the three namespaces. Every process on a host runs in its
# namespace under the host's name (a UTS namespace); the file system and the process ids are shared.
# Provides: $ns, hosts_mpirun ARGS... (mpirun from hosta over the hostfile $tmp/hosts, "hosta slots=2", "hostb slots=2";
# OpenMPI over TCP between the hosts); exits 77 where namespaces are not permitted; removes everything on exit.
for c in ip unshare tc; do
  command -v "$c" >/dev/null 2>&1 || { echo "SKIP: $c not installed (mk/deps.sh test installs iproute2)"; exit 77; }
done
ns=dmh$$ # namespaces ${ns}a, ${ns}b (the hosts) and ${ns}br (the bridge)
cleanup() {
  for j in $(jobs -p); do kill "$j" 2>/dev/null; done
  for n in ${ns}a ${ns}b ${ns}br; do
    for p in $(ip netns pids "$n" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$n" 2>/dev/null
  done
  wait 2>/dev/null
  [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add ${ns}br 2>/dev/null || { echo "SKIP: cannot create network namespaces (ip netns add: needs root/CAP_SYS_ADMIN)"; exit 77; }
ip netns add ${ns}a && ip netns add ${ns}b || fail "ip netns add"
ip -n ${ns}br link add br0 type bridge && ip -n ${ns}br link set br0 up || fail "bridge"
i=1
for h in a b; do
  ip link add veth0 netns ${ns}$h type veth peer name p$h netns ${ns}br || fail "veth pair for host$h"
  ip -n ${ns}br link set p$h master br0 && ip -n ${ns}br link set p$h up || fail "bridge port p$h"
  ip -n ${ns}$h link set lo up && ip -n ${ns}$h addr add 10.88.0.$i/24 dev veth0 && ip -n ${ns}$h link set veth0 up \
    || fail "host$h address"
  i=$((i + 1))
done
unshare --uts true 2>/dev/null || { echo "SKIP: unshare --uts not permitted (each host needs its own hostname)"; exit 77; }

# The launch agent (plm_rsh_agent): "agent HOST COMMAND..." runs COMMAND in HOST's namespace under HOST's name.
cat >"$tmp/agent.sh" <<EOF
#!/bin/sh
host=\$1
shift
exec ip netns exec "${ns}\${host#host}" unshare --uts sh -c 'hostname "\$1" && exec sh -c "\$2"' agent "\$host" "\$*"
EOF
chmod +x "$tmp/agent.sh"
printf 'hosta slots=2\nhostb slots=2\n' >"$tmp/hosts"

# hosts_mpirun ARGS...: mpirun from hosta; the two "hosts" share this machine's cores, so a waiting rank yields its core
# (as mpirun does when told it oversubscribes).
hosts_mpirun() {
  ip netns exec ${ns}a unshare --uts sh -c 'hostname hosta && exec "$@"' hosta \
    mpirun --hostfile "$tmp/hosts" --bind-to none --mca mpi_yield_when_idle 1 --mca plm_rsh_agent "$tmp/agent.sh" \
    --mca btl self,vader,tcp --mca btl_tcp_if_include 10.88.0.0/24 --mca oob_tcp_if_include 10.88.0.0/24 "$@"
}
