"""Gym entry point of Polar's agent server (`entrypoint: polar_agent.py` in configs/polar.yaml)."""

from polar.trainers.nemo_gym.servers import PolarAgent

if __name__ == "__main__":
    PolarAgent.run_webserver()
