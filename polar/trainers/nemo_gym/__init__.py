"""NeMo Gym: Polar as a Gym environment (an agent server and a resources server).

`servers.py` holds the two nemo-gym 0.4.0 server classes and imports `nemo_gym`: it runs only in
`.venv-gym` (Python 3.12, `scripts/setup_gym_venv.sh`). `shapes.py` is what they answer, as plain
JSON, with no `nemo_gym` import (tested in `.venv`). See README.md beside this file.
"""
