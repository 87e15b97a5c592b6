"""Workloads ATTUNE ships: torchtitan config functions usable as ``--module``/``--config``."""
