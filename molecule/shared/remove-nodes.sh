#!/usr/bin/env bash
# remove-nodes.sh LABEL VALUE [NETWORK...]: remove every node container that carries LABEL=VALUE, with its
# anonymous volumes (/var/lib/docker), then the NETWORKs, then the cgroups of the containers the nodes' own
# dockerds ran: the nodes share the host's cgroup tree, and a node killed with its pods leaves their
# (empty) cgroups behind. Finding nothing to remove is fine: this also cleans up after a crashed run.
set -euo pipefail
label=$1 value=$2
shift 2

nodes=$(docker ps --all --quiet --filter "label=$label=$value")
pods=()
for node in $nodes; do
    [[ $(docker inspect --format '{{ .State.Running }}' "$node") == true ]] || continue
    # shellcheck disable=SC2016
    mapfile -t -O "${#pods[@]}" pods < <(timeout 30 docker exec "$node" \
        sh -c 'command -v docker >/dev/null && docker ps --all --quiet --no-trunc' 2>/dev/null || true)
done
if [[ -n $nodes ]]; then
    # shellcheck disable=SC2086
    docker rm --force --volumes $nodes >/dev/null
    echo "removed containers: $(echo $nodes)"
fi

for network; do
    if docker network inspect "$network" >/dev/null 2>&1; then
        docker network rm "$network" >/dev/null
        echo "removed network $network"
    fi
done

if ((${#pods[@]})); then
    # A cgroup goes with rmdir once no process is in it; children first.
    find /sys/fs/cgroup -mindepth 2 -maxdepth 6 -type d -regextype egrep \
        -regex ".*/($(IFS='|'; echo "${pods[*]}"))" -prune -print 2>/dev/null \
        | while read -r dir; do find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null || true; done
    echo "removed the cgroups of ${#pods[@]} containers of the nodes"
fi
