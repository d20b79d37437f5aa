#!/usr/bin/env bash
# Removes what a Docker daemon left in one iptables backend ("nft" or "legacy", $1) after the machine moved to
# the other. The kernel runs the hooks of both backends, so a leftover FORWARD chain with policy DROP there
# drops every packet that the Docker of the chosen backend lets through (containers reach the host, nothing
# beyond). Only Docker's rules (those naming its chains or bridges) and chains go; FORWARD returns to ACCEPT
# only when nothing else is left in it. Prints one "removed ..." line per change, nothing when all is clean.
set -euo pipefail

backend=${1:?usage: forget-docker-rules.sh nft|legacy}
[[ $backend == nft || $backend == legacy ]] || { echo "backend must be nft or legacy, not '$backend'" >&2; exit 2; }

docker_rule='DOCKER|docker0|br-[0-9a-f]{12}'

forget() {
    local command=$1 table rule chain
    command -v "$command" >/dev/null || return 0
    # Where the backend cannot be read (a container without nf_tables, say), it holds nothing of Docker's.
    "$command" -t filter -S >/dev/null 2>&1 || return 0
    for table in filter nat; do
        while IFS= read -r rule; do
            eval "set -- ${rule/#-A /-D }"
            "$command" -t "$table" "$@"
            echo "removed from $command's $table table: $rule"
        done < <("$command" -t "$table" -S | grep -E '^-A ' | grep -E -- "$docker_rule" || true)
        while IFS= read -r chain; do
            "$command" -t "$table" -F "$chain"
            "$command" -t "$table" -X "$chain"
            echo "removed chain $chain from $command's $table table"
        done < <("$command" -t "$table" -S | sed -n -E 's/^-N (DOCKER[A-Za-z0-9_-]*)$/\1/p')
    done
    if "$command" -t filter -S FORWARD | grep -qx -- '-P FORWARD DROP' \
        && ! "$command" -t filter -S FORWARD | grep -q '^-A '; then
        "$command" -t filter -P FORWARD ACCEPT
        echo "removed the DROP policy of $command's empty FORWARD chain"
    fi
}

forget "iptables-$backend"
forget "ip6tables-$backend"
