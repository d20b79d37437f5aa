#!/usr/bin/env bash
# Stand up a minik8s cluster: installs Ansible (pinned, from PyPI) into .tools/ansible, then runs
# `ansible-playbook site.yml`. Without arguments the cluster is this machine (inventory/local, run as
# root); extra arguments go to ansible-playbook, e.g. `bash scripts/cluster-up.sh -i inventory/example`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV=.tools/ansible
REQUIREMENTS=requirements-ansible.txt
# Debian's own Python: Ansible's controller and the nodes' interpreter are the same python3.
PYTHON=/usr/bin/python3

# A fresh Debian 12 has python3 but neither the venv module nor pip.
if ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
    echo "installing python3-venv and python3-pip"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends python3-venv python3-pip >/dev/null
fi

# (Re)install Ansible when the pinned requirements changed since the last install.
stamp="$VENV/.requirements.sha256"
wanted=$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)
if [[ ! -x $VENV/bin/ansible-playbook || ! -f $stamp || $(cat "$stamp") != "$wanted" ]]; then
    echo "installing Ansible into $VENV"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQUIREMENTS"
    echo "$wanted" >"$stamp"
fi

export ANSIBLE_CONFIG="$PWD/ansible.cfg"
exec "$VENV/bin/ansible-playbook" site.yml "$@"
