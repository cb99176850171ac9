"""activities.runtimes.network."""
