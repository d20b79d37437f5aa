"""minik8s-flanneld: the pod overlay network.

Each node leases a subnet of the cluster network in etcd (flannel's key
layout, so the records read as flannel's do), writes it to subnet.env for
Docker's bridge, and routes every other node's subnet over a VXLAN device.
"""
