"""``minik8s-controller-manager``: one daemon running the cluster's controllers over shared informer caches.

Each controller is a level-triggered loop (``daemons.machinery.controller``) that
turns what objects declare into the objects they imply, such as a Service's
Endpoints. The controllers of the daemon are rows of ``controllers.CONTROLLERS``;
they share one informer, hence one cache and one event queue, per resource.
"""
