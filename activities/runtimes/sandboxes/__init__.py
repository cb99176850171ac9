"""activities.runtimes.sandboxes."""
