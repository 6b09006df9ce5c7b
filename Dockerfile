# syntax=docker/dockerfile:1.7
# Partitura's service image: build a virtual environment in one stage, run it in a slim one as a
# non-root user under tini. Start-up applies the migrations to DATABASE_URL, then serves on $PORT.
#   docker build -t partitura .
#   docker run -p 8000:8000 -v partitura-data:/data partitura
# .ci/image-check builds it with podman on a debootstrapped bookworm base and runs it as its user.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/venv
# The whole dependency tree, pinned with hashes (make lock), in a layer of its own; then the
# package alone. tests/test_docker.py runs these RUN commands in a fresh venv.
COPY requirements.lock ./
RUN /opt/venv/bin/pip install --require-hashes -r requirements.lock
COPY pyproject.toml README.md ./
COPY solver ./solver
COPY catalog ./catalog
COPY profiler ./profiler
COPY app ./app
RUN /opt/venv/bin/pip install --no-deps .
# What the service never runs: pip and setuptools themselves and the packages' own test suites
# (pandas and numpy ship 60 MB of them). The byte code compiled at install stays (46 MB): the image's
# user cannot write it, so without it every start and every solver process compiles ortools,
# pandas and the rest again (start 6 s instead of 3 s, the first plan 1.8 s instead of 1 s).
RUN /opt/venv/bin/pip uninstall --yes pip setuptools \
    && find /opt/venv/lib -depth -type d -name tests -exec rm -rf {} +

FROM ${PYTHON_IMAGE} AS runtime
# tini as PID 1: it reaps the solver pool's processes and forwards signals (or `docker run --init`).
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install --yes --no-install-recommends tini \
    && apt-get clean && rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PARTITURA_MIGRATIONS_DIR=/app/migrations \
    DATABASE_URL=sqlite:////data/partitura.db \
    HOST=0.0.0.0 \
    PORT=8000
RUN groupadd --system --gid 10001 partitura \
    && useradd --system --uid 10001 --gid partitura --home-dir /app --no-create-home partitura \
    && mkdir -p /data \
    && chown partitura:partitura /data
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY migrations ./migrations
COPY alembic.ini ./
USER partitura
EXPOSE 8000
VOLUME ["/data"]
# Slim images have no curl: ask /healthz with the standard library (urlopen raises on non-2xx).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PORT', '8000'), timeout=4)"]
# Under tini, apply the migrations, then replace the shell with the server (signals reach uvicorn).
ENTRYPOINT ["tini", "--", "/bin/sh", "-c", "partitura db upgrade && exec \"$@\"", "partitura-entrypoint"]
CMD ["partitura", "serve"]
