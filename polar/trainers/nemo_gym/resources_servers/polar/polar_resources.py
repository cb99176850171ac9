"""Gym entry point of Polar's resources server (`entrypoint: polar_resources.py`)."""

from polar.trainers.nemo_gym.servers import PolarResources

if __name__ == "__main__":
    PolarResources.run_webserver()
