"""Doctests in the package see ``torch`` and ``nn`` without importing them."""

import pytest
import torch
from torch import nn


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace):
    doctest_namespace.update(torch=torch, nn=nn)
