"""A Spark session for the loader's tests: local[2], UTC, no UI (one per
test session: a JVM takes seconds to start)."""
from __future__ import annotations

import os
import sys

import pytest

from schemas import catalog
from schemas.registry import SchemaRegistry


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # the executors' Python workers run this interpreter (its packages), not
    # whatever python3 is first on the PATH
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    session = (SparkSession.builder.master("local[2]").appName("samsa-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", "4")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def analysis(clusters):
    cluster = clusters("analysis", settings={"default_partitions": 2})
    registry = SchemaRegistry.open(f"zookeeper://{cluster.connect}")
    registry.register("page_views", catalog.load("samsa.events.PageViewEvent"))
    registry.register("page_views", catalog.load("samsa.events.PageViewEvent.v2"))
    yield cluster, registry
    registry.close()
