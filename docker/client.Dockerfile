# Client side of sstq-fl: a Flower SuperNode, which runs the ClientApp (sstq_fl.flower.apps.sstq_client:app) in a
# subprocess for each message (isolation "subprocess").  Build from the repository root:
#   docker build -f docker/client.Dockerfile -t sstq-fl-client .
# The app's code is not baked in: the SuperNode fetches the FAB of each run; the image holds its dependencies.
ARG FLWR_VERSION=1.42.0
FROM flwr/supernode:${FLWR_VERSION}

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
# Set SSTQ_SUPERLINK, SSTQ_PARTITION_ID, SSTQ_NUM_PARTITIONS (and SSTQ_TLS_DIR for TLS) at run time.
COPY docker/launch.py docker/commands.json /app/docker/
ENTRYPOINT ["python", "/app/docker/launch.py", "supernode"]
