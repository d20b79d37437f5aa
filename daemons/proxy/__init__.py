"""minik8s-proxy: makes Services work on a node.

Services and Endpoints become kube-proxy's iptables layout (``rules``, pure),
applied with python-iptables in one commit per table (``iptables``), kept in
step with the cluster by one sync loop fed by informers (``proxier``).
"""
