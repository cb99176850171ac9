#!/usr/bin/env bash
# Write a .env for compose.yaml with freshly generated secrets (session HMAC secret, admin token,
# S3 keys, PostgreSQL password); every other value comes from .env.example.
#   infra/deploy/new-env.sh [OUT]     (default: .env beside this script; never overwritten)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/.env}"
if [ -e "$out" ]; then
  echo "$out exists: not overwriting its secrets" >&2
  exit 1
fi
gen() { python3 -c 'import secrets; print(secrets.token_urlsafe(32))'; }
umask 077
{
  grep -v -E '^(POLAR_SESSION_SECRET|POLAR_ADMIN_TOKEN|POLAR_S3_ACCESS_KEY|POLAR_S3_SECRET_KEY|POSTGRES_PASSWORD)=' \
    "$here/.env.example"
  echo "POLAR_SESSION_SECRET=$(gen)"
  echo "POLAR_ADMIN_TOKEN=$(gen)"
  echo "POLAR_S3_ACCESS_KEY=polar-$(python3 -c 'import secrets; print(secrets.token_hex(8))')"
  echo "POLAR_S3_SECRET_KEY=$(gen)"
  echo "POSTGRES_PASSWORD=$(gen)"
} > "$out"
echo "wrote $out (mode 600); set POLAR_UPSTREAM_URLS there if the default is not yours"
