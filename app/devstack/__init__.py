"""The embedded dev stack: Docker engine, Temporal dev server, SeaweedFS, vLLM, gateway, workers.

Each part is a background process with a pid file and a log under
`{data_dir}/run/`. Starting is idempotent (a healthy running part is left
alone), stopping kills the process group. Production runs the same gateway and
worker code against a Temporal cluster, AWS S3 and a vLLM/SGLang fleet; only
this package is dev-only: `services.py` defines each part (its command line,
environment and readiness check), `stack.py` runs them (DevStack).

The Docker engine is a part only where `dockerd` is installed (infra/setup.sh
installs Debian's docker.io): `up` starts it when no engine answers (system
default socket and data root, so built images stay cached; no bridge and no
iptables rules: sessions have no network, only their gateway channel), then builds the local images
(infra/images/build.py, cached). An engine that already answers is used as
is and never stopped by `down`.
"""

from app.devstack.services import Service, StackError, http_ready, port_open
from app.devstack.stack import DevStack

__all__ = ["DevStack", "Service", "StackError", "http_ready", "port_open"]
