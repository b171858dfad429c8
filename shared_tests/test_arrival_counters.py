"""kernels/arrival_counters.py: who may reuse a region of zeroed counters (CPU: no GPU needed)."""
import threading

import pytest
import torch

from tilerosetta.kernels import arrival_counters as ac


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(ac, "_arenas", {})
    monkeypatch.setattr(ac, "_eager", {})
    monkeypatch.setattr(ac, "ARENA_REGIONS", 3)
    return ac


def test_eager_calls_of_one_owner_reuse_their_region(fresh):
    cpu = torch.device("cpu")
    a, b = fresh.region(cpu, 10), fresh.region(cpu, 100)
    assert a.data_ptr() == b.data_ptr() and a.dtype == torch.int32 and not b.any()
    other = []
    t = threading.Thread(target=lambda: other.append(fresh.region(cpu, 10)))
    t.start()
    t.join()
    assert other[0].data_ptr() != a.data_ptr()  # another thread (another stream on a GPU): its own region


def test_captured_launches_get_regions_of_their_own_until_the_arena_is_spent(fresh, monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(fresh, "_capturing", lambda device: True)
    assert fresh.region(cpu, 4) is None  # no arena yet: it cannot be zero-filled inside a capture
    monkeypatch.setattr(fresh, "_capturing", lambda device: False)
    eager = fresh.region(cpu, 4)
    monkeypatch.setattr(fresh, "_capturing", lambda device: True)
    got = [fresh.region(cpu, 4), fresh.region(cpu, 4)]
    assert len({eager.data_ptr(), *(g.data_ptr() for g in got)}) == 3
    assert fresh.region(cpu, 4) is None  # 3 regions handed out: the caller launches its merge kernel


def test_too_many_tiles_get_no_region(fresh):
    assert fresh.region(torch.device("cpu"), fresh.REGION + 1) is None
