"""Fixtures shared by the system lane's adversarial tests (tests/support/adversary/stack.py)."""

from tests.support.adversary.stack import bwrap_stack, sealed_stack

__all__ = ["bwrap_stack", "sealed_stack"]
