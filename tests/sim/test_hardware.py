"""Hardware profiles: required ids, cited figures."""

import pytest

from bot.sim.hardware import HARDWARE, get_hardware


@pytest.mark.parametrize("hw_id", ["h100-sxm-80gb", "h100-96gb", "h200", "b200"])
def test_profiles_are_complete_and_cited(hw_id):
    hw = get_hardware(hw_id)
    assert hw.sources and all(s.startswith("https://") for s in hw.sources)
    assert hw.fp8_tflops == pytest.approx(2 * hw.bf16_tflops, abs=1.0)
    assert hw.gpus_per_node == 8
    assert hw.internode_gbs == 50.0  # 400 Gb/s per GPU


def test_datasheet_figures():
    assert HARDWARE["h100-sxm-80gb"].bf16_tflops == 989.0
    assert HARDWARE["h200"].hbm_tbs == 4.8
    assert HARDWARE["h100-96gb"].hbm_tbs == 2.4 and HARDWARE["h100-96gb"].tdp_w == 500
    assert HARDWARE["b200"].bf16_tflops == 2250.0 and HARDWARE["b200"].nvlink_gbs == 900.0


def test_unknown_hardware():
    with pytest.raises(KeyError, match="h200"):
        get_hardware("a100")
