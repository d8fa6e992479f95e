# syntax=docker/dockerfile:1
#
# One image for every workload: the container runs `reminders <subcommand>`
# (api, coordinator, sweeper, sender, maintenance, migrate, ...; see k8s/).
#
#   docker build -t reminders:0.1.0 .
#   docker run --rm --read-only --tmpfs /tmp -e DATABASE_URL=... reminders:0.1.0 migrate
#
# Runs as UID/GID 10001 and writes nothing outside /tmp, so it works with a read-only root
# filesystem (Kubernetes mounts an emptyDir on /tmp). Production configuration writes no
# local state: DATABASE_URL (no embedded PostgreSQL), JWT_SECRET (no key file), a real
# EMAIL_PROVIDER (no file sink) and PROFILE_SERVICE_URL (no profiles file).
#
# Both stages must use the same base image: the virtual environment built in the first is
# copied into the second and points at its /usr/local/bin/python3.11. Pin a digest for
# reproducible builds: --build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:...

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: the project's wheel, installed with its dependencies into /opt/venv ---------
FROM ${PYTHON_IMAGE} AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

RUN python -m venv /opt/venv

WORKDIR /src
# .dockerignore lets in only pyproject.toml, README.md and the packages.
COPY . .
# pip compiles the installed modules to .pyc here, so the read-only runtime never needs to.
RUN /opt/venv/bin/pip wheel --no-deps --wheel-dir /wheels . \
    && /opt/venv/bin/pip install /wheels/*.whl \
    && /opt/venv/bin/reminders --help > /dev/null

# --- runtime: the virtual environment and an unprivileged user, nothing else -----------
FROM ${PYTHON_IMAGE} AS runtime

RUN groupadd --system --gid 10001 reminders \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin reminders

COPY --from=build /opt/venv /opt/venv

# HOME and TMPDIR point at /tmp, the only writable place; no bytecode is written at run time.
ENV PATH=/opt/venv/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp

# Owned by root and not writable by the app: a setting left at its laptop default (STATE_DIR
# ./.reminders) fails loudly instead of writing into the container.
WORKDIR /app

# Numeric, so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001

# The API (`reminders api --port 8000`); workers expose only their metrics port.
EXPOSE 8000

# Python is PID 1: the workloads install their own SIGTERM/SIGINT handlers (soft stop,
# then hard stop after SHUTDOWN_GRACE_S) and start no child processes to reap.
ENTRYPOINT ["reminders"]
CMD ["--help"]
