"""minik8s-proxy: makes Services work on a node, and DNS objects' hosts reach them.

Services, Endpoints and DNS objects become one ``ClusterView`` (``names``,
pure) that every programmer converges the node to: kube-proxy's iptables
layout (``rules``, pure), applied with python-iptables in one commit per table
(``iptables``); nginx's configuration, rendered from ``templates/nginx.conf.j2``
and tested before a reload (``nginx``); dnsmasq's hosts file (``dnsmasq``).
One sync loop fed by informers (``proxier``) keeps them in step with the cluster.
"""
