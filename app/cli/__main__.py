"""`python -m app.cli`: the `polar` command line, as the dev stack, Helm chart, compose file
and Slurm templates start its processes."""

from app.cli import app

app()
