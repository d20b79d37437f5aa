"""minik8s-proxy."""
