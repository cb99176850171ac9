"""Fixtures shared by the system lane: the adversarial tests' stacks
(tests/support/adversary/stack.py) and the egress tests' internet and worker
(tests/support/egress_stack.py)."""

from tests.support.adversary.stack import bwrap_stack, sealed_stack
from tests.support.egress_stack import egress_polar, internet

__all__ = ["bwrap_stack", "egress_polar", "internet", "sealed_stack"]
