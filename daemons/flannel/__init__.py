"""minik8s-flannel."""
