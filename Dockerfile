# syntax=docker/dockerfile:1.7
# Partitura's service image: build a virtual environment in one stage, run it in a slim one as a
# non-root user. Start-up applies the migrations to DATABASE_URL, then serves on $PORT.
#   docker build -t partitura .
#   docker run -p 8000:8000 -v partitura-data:/data partitura
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY solver ./solver
COPY catalog ./catalog
COPY profiler ./profiler
COPY app ./app
# The same command tests/test_docker.py runs in a fresh venv (pinned versions from pyproject.toml).
RUN --mount=type=cache,target=/root/.cache/pip /opt/venv/bin/pip install .

FROM ${PYTHON_IMAGE} AS runtime
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
# Apply the migrations, then replace the shell with the server (signals reach uvicorn).
ENTRYPOINT ["/bin/sh", "-c", "partitura db upgrade && exec \"$@\"", "partitura-entrypoint"]
CMD ["partitura", "serve"]
