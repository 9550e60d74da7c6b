"""FCCL's bad input: the CLI refuses it with exit status 2, naming the key path, without a traceback."""

from __future__ import annotations

import copy

import pytest

from tests.badinput import assert_refused
from tests.conftest import TINY


def _raw(public=None, **protocol):
    raw = copy.deepcopy(TINY)
    if public is not False:
        raw["data"]["public"] = {"size": 60, "labelled": False, **(public or {})}
    raw["protocol"] = {"name": "fccl", "public_size": 30, "public_batch_size": 10, "pretrain_epochs": 1, **protocol}
    return raw


@pytest.mark.parametrize(("raw", "key"), [
    (_raw(public=False), "data.public"),
    (_raw(public={"placement": "server_only"}), "data.public.placement"),
    (_raw(public_batch_size=29), "protocol.public_batch_size"),  # 30 = 29 + 1: a batch of one sample
    (_raw(exchange="per_epoch"), "protocol.exchange"),
    (_raw(self_target="mean"), "protocol.self_target"),
    (_raw(lambda_col=-1.0), "protocol.lambda_col"),
    (_raw(collaborate=False), "stop.virtual_time_s"),  # no cloud aggregation: stop.rounds never ends it
])
def test_refused(tmp_path, capsys, raw, key):
    assert_refused(tmp_path, capsys, raw, key)


def test_a_weight_trainer_is_refused(tmp_path, capsys):
    raw = _raw()
    raw["training"]["trainer"] = {"name": "fedprox", "mu": 0.1}
    assert_refused(tmp_path, capsys, raw, "training.trainer")
