"""``--dtype auto`` never picks bfloat16 where the device computes it only by emulation (a bf16
step on such a CPU ran 8x slower than its profile). ``kvplan calibrate --dtype auto`` resolves
it the same way: ``profile_engine`` loads the model in ``EngineArgs(dtype=...).torch_dtype``."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from runtime.args import EngineArgs  # noqa: E402


def test_auto_is_float32_on_cpu():
    assert EngineArgs().torch_dtype(torch.device("cpu")) == torch.float32
    assert EngineArgs(dtype="bfloat16").torch_dtype(torch.device("cpu")) == torch.bfloat16  # asked for


@pytest.mark.parametrize("native, expected", [(True, torch.bfloat16), (False, torch.float16)])
def test_auto_on_cuda_is_bfloat16_only_where_native(monkeypatch, native, expected):
    calls = []

    def is_bf16_supported(including_emulation: bool = True) -> bool:
        calls.append(including_emulation)
        return native or including_emulation  # an old GPU: "supported" only by emulation

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    assert EngineArgs().torch_dtype(torch.device("cuda")) == expected
    assert calls == [False]  # emulation does not count

