"""broker/coordination/named_cluster.py: the one way a cluster is named, on a
command line and in settings."""
from __future__ import annotations

import argparse

import pytest

from broker.coordination.named_cluster import (NamedCluster, add_cluster_option, cluster_from,
                                               parse_cluster)
from broker.service_kit.settings import ConfigError


@pytest.mark.parametrize("text, name, connect", [
    ("dc-a=127.0.0.1:2181/dc-a", "dc-a", "127.0.0.1:2181/dc-a"),
    (" dc_b.1 = h1:2181,h2:2181/x/dc-b ", "dc_b.1", "h1:2181,h2:2181/x/dc-b"),
    ("127.0.0.1:2181/analysis", "analysis", "127.0.0.1:2181/analysis"),
    ("127.0.0.1:2181/samsa/dc-a/", "dc-a", "127.0.0.1:2181/samsa/dc-a/"),
])
def test_a_cluster_on_the_command_line(text, name, connect):
    assert parse_cluster(text) == NamedCluster(name, connect)


@pytest.mark.parametrize("text", ["dc a=127.0.0.1:2181/x", "dc-a=127.0.0.1/x",
                                  "127.0.0.1:2181", "dc-a=", "dc/a=127.0.0.1:2181/x"])
def test_what_is_not_a_cluster_says_the_form(text):
    with pytest.raises(ConfigError, match="NAME=ZOOKEEPER"):
        parse_cluster(text)


def parsed(*argv: str):
    parser = argparse.ArgumentParser()
    add_cluster_option(parser, "the cluster", zookeeper_flags=("--zookeeper", "-z"))
    return cluster_from(parser.parse_args(argv))


def test_the_zookeeper_alias_takes_every_connect_string_it_took_before():
    assert parsed() is None
    assert parsed("--zookeeper", "127.0.0.1:2181") == NamedCluster("default", "127.0.0.1:2181")
    assert parsed("-z", "127.0.0.1:2181/dc-a").name == "dc-a"
    odd = parsed("--zookeeper", "127.0.0.1:2181/samsa/dc@1")
    assert odd == NamedCluster("default", "127.0.0.1:2181/samsa/dc@1")
    with pytest.raises(ConfigError, match="give one"):
        parsed("--cluster", "a=127.0.0.1:2181/a", "--zookeeper", "127.0.0.1:2181/a")
    with pytest.raises(ConfigError):
        parsed("--zookeeper", "no-port/dc-a")


def test_the_same_cluster_by_another_name_or_spelling():
    a = NamedCluster("a", "localhost:2181,h2:2181/dc-a")
    assert a.same_cluster(NamedCluster("b", "127.0.0.1:2181/dc-a"))
    assert not a.same_cluster(NamedCluster("a", "127.0.0.1:2181/dc-b"))
