#!/usr/bin/env bash
# Create docker/.env: the secrets docker/compose.yaml requires, random, readable by you only.
#
#   scripts/compose_secrets.sh            # writes docker/.env (mode 0600)
#   scripts/compose_secrets.sh PATH       # writes PATH instead
#
# Writes AIRFLOW_JWT_SECRET (64 random bytes, hex: Airflow signs task tokens with HS512),
# AIRFLOW_API_SECRET_KEY (32 bytes, hex), AIRFLOW_FERNET_KEY (32 bytes, url-safe base64: a
# Fernet key, encrypting connection passwords in the metadata DB), POSTGRES_PASSWORD and
# RABBITMQ_PASSWORD (24 bytes each, hex: safe inside the SQLAlchemy and broker URLs). Refuses
# to overwrite an existing file (exit 1): the PostgreSQL and RabbitMQ volumes keep the
# passwords they were created with, and the metadata DB stays encrypted with the old Fernet
# key. Nothing here is printed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="${1:-$ROOT/docker/.env}"

case "${target}" in
    -h | --help)
        sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
esac
if [[ $# -gt 1 ]]; then
    echo "compose_secrets.sh: at most one argument, the file to write (try --help)" >&2
    exit 2
fi
if [[ -e "$target" || -L "$target" ]]; then
    echo "compose_secrets.sh: $target exists; not overwriting it (delete it to start afresh," \
        "together with the postgres-data and rabbitmq-data volumes)" >&2
    exit 1
fi

# n random bytes from the kernel, as hex or as url-safe base64.
hex() { head -c "$1" /dev/urandom | od -An -v -tx1 | tr -d ' \n'; }
b64url() { head -c "$1" /dev/urandom | base64 | tr -d '\n' | tr '+/' '-_'; }

jwt="$(hex 64)"
api="$(hex 32)"
fernet="$(b64url 32)"
postgres="$(hex 24)"
rabbitmq="$(hex 24)"
for value in "$jwt" "$api" "$postgres" "$rabbitmq"; do
    [[ "$value" =~ ^[0-9a-f]+$ ]] || { echo "compose_secrets.sh: no random bytes" >&2; exit 1; }
done

umask 077
tmp="$(mktemp "$(dirname "$target")/.compose-secrets.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
cat >"$tmp" <<ENV
# Secrets of docker/compose.yaml, made by scripts/compose_secrets.sh. Never commit this file.
AIRFLOW_JWT_SECRET=$jwt
AIRFLOW_API_SECRET_KEY=$api
AIRFLOW_FERNET_KEY=$fernet
POSTGRES_PASSWORD=$postgres
RABBITMQ_PASSWORD=$rabbitmq
ENV
chmod 600 "$tmp"
# A hard link fails if the target appeared meanwhile: an existing file is never replaced.
if ! ln "$tmp" "$target" 2>/dev/null; then
    echo "compose_secrets.sh: could not create $target (it exists now, or the folder is" \
        "not writable)" >&2
    exit 1
fi
echo "wrote $target (mode 0600); docker compose -f docker/compose.yaml reads it"
