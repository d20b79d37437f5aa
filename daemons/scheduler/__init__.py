"""The scheduler: binds every unscheduled pod to a node that can run it.

Pure pieces (``usage``, ``predicates``, ``strategies``) decide; ``scheduler``
feeds them from informer caches and writes the binding, events and the
PodScheduled condition; ``main`` is the ``minik8s-scheduler`` console script.
"""
