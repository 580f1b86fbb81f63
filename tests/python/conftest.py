"""Shared pytest set-up: make attention_reference importable and seed numpy per test."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
