"""activities.runtimes.kinds."""
