"""minik8s-controller-manager."""
