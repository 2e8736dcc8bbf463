#!/bin/sh
# The k3s node's entrypoint: what a node container lacks for k3s, then k3s
# itself in this process (PID 1, where k3s sets up its cgroups).
#
# - `/` becomes a shared mount, so pods' mounts with Bidirectional or
#   HostToContainer propagation (CSI drivers, storage add-ons) propagate.
# - DNS. Docker's embedded resolver answers at 127.0.0.11, through NAT
#   rules Docker adds to this network namespace, for this namespace's own
#   traffic only. k3s finds that loopback address in /etc/resolv.conf and
#   hands pods 8.8.8.8 instead: no answers offline, on VPNs or behind a
#   corporate resolver, and no names of the environment's network. The
#   rules move to DEV_ENV_DNS_ADDRESS (the network's gateway), traffic from
#   pods is sent through them too, and /etc/resolv.conf names that address,
#   so CoreDNS forwards to Docker's resolver and the host's resolvers behind
#   it. On a restart Docker adds its rules again; they are moved again.
set -eu

embedded='127\.0\.0\.11'
dns=${DEV_ENV_DNS_ADDRESS:?names the address pods send DNS queries to}

say() { echo "dev-env entrypoint: $*" >&2; }

# Moves Docker's DNS rules to $dns in the iptables flavour that holds them.
# Fails when no flavour holds them (an engine without its embedded DNS).
move_dns_rules() {
  for ipt in iptables iptables-nft iptables-legacy; do
    command -v "$ipt-save" >/dev/null 2>&1 || continue
    rules=$("$ipt-save" -t nat 2>/dev/null) || continue
    if printf '%s\n' "$rules" | grep -q -- "-A DOCKER_OUTPUT -d $dns/32"; then
      return 0
    fi
    printf '%s\n' "$rules" | grep -q -- "-A DOCKER_OUTPUT -d $embedded/32" || continue
    printf '%s\n' "$rules" \
      | sed -e "s#-d $embedded/32#-d $dns/32#g" \
            -e "s#--to-source :53#--to-source $dns:53#g" \
      | "$ipt-restore" \
      || { say "$ipt-restore refused the moved DNS rules"; exit 1; }
    "$ipt" -t nat -A PREROUTING -d "$dns/32" -j DOCKER_OUTPUT \
      || { say "$ipt could not send pods' DNS queries to Docker's resolver"; exit 1; }
    say "Docker's DNS answers at $dns ($ipt)"
    return 0
  done
  return 1
}

# /etc/resolv.conf is a file Docker mounts: written in place, never renamed.
point_resolv_conf() {
  grep -q "^nameserver $embedded\$" /etc/resolv.conf || return 0
  conf=$(sed "s/^nameserver $embedded\$/nameserver $dns/" /etc/resolv.conf)
  printf '%s\n' "$conf" >/etc/resolv.conf
}

mount --make-rshared / \
  || { say "cannot make / a shared mount (the node needs a privileged container)"; exit 1; }

if move_dns_rules; then
  point_resolv_conf
else
  say "no iptables rules of Docker's embedded DNS found; pods get k3s's default resolver"
fi

exec /bin/k3s "$@"
