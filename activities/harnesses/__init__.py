"""Harness adapters: how each agent program is configured and launched."""
