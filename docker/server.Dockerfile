# Server side of sstq-fl: the Flower SuperLink, which runs the ServerApp (sstq_fl.flower.apps.sstq_server:app)
# in a subprocess of its own (isolation "subprocess").  Build from the repository root:
#   docker build -f docker/server.Dockerfile -t sstq-fl-server .
# The app's code is not baked in: `flwr run` submits it (the FAB); the image holds its dependencies.
ARG FLWR_VERSION=1.42.0
FROM flwr/superlink:${FLWR_VERSION}

# Extra pip arguments, e.g. "--extra-index-url <a CPU-only torch wheel index>" for a smaller image.
ARG PIP_EXTRA_ARGS=""

WORKDIR /app
COPY pyproject.toml constraints.txt /app/
# The app's dependencies from pyproject.toml at constraints.txt's versions, except flwr itself (the base image has
# the same version).
RUN python -c "import tomllib; deps = tomllib.load(open('/app/pyproject.toml', 'rb'))['project']['dependencies']; print('\n'.join(d for d in deps if not d.startswith('flwr')))" > /tmp/requirements.txt \
    && python -m pip install --no-cache-dir ${PIP_EXTRA_ARGS} -c /app/constraints.txt -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# The start-up command lives in docker/commands.json (the deployment tests run the same one).
COPY docker/launch.py docker/commands.json /app/docker/
ENV SSTQ_HOST=0.0.0.0 \
    SSTQ_PORT=9093
EXPOSE 9093
ENTRYPOINT ["python", "/app/docker/launch.py", "superlink"]
