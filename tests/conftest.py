"""Shared pytest configuration: the `cuda` marker skips cleanly without a GPU, `torch` without torch/torchao."""

from __future__ import annotations

import importlib.util

import pytest


def _torch():
    """torch, or None where it is absent or fails to import (a broken install skips like a missing one)."""
    if importlib.util.find_spec("torch") is None:
        return None
    try:
        import torch
    except ImportError:
        return None
    return torch


def _has_cuda() -> bool:
    torch = _torch()
    return torch is not None and bool(torch.cuda.is_available())


def _has_torchao() -> bool:
    return _torch() is not None and importlib.util.find_spec("torchao") is not None


def pytest_collection_modifyitems(config, items):
    skip_cuda = pytest.mark.skip(reason="needs an NVIDIA GPU with CUDA (sm_90)")
    skip_torch = pytest.mark.skip(reason="needs the `torch` extra (torch + torchao)")
    cuda = torch_ok = None
    for item in items:
        if "cuda" in item.keywords:
            cuda = _has_cuda() if cuda is None else cuda
            if not cuda:
                item.add_marker(skip_cuda)
        if "torch" in item.keywords:
            torch_ok = _has_torchao() if torch_ok is None else torch_ok
            if not torch_ok:
                item.add_marker(skip_torch)
