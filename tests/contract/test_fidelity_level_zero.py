"""The simulated Level Zero driver against the Level Zero specification's and compute-runtime's
own examples, and intelrt's reading of a mask against the simulated driver.

``intelrt.testing.level_zero`` ports compute-runtime's ``parseAffinityMask``; ``intelrt_xpu.affinity``
is intelrt's own prediction of it (written separately, so the two can disagree). The spec
examples are oneapi-src/level-zero-spec ``scripts/core/PROG.rst`` (two parent devices with four
tiles each); the driver cases are compute-runtime's ``execution_environment_tests.cpp``.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from intelrt.testing.level_zero import PRODUCTS, DriverInitError, Product, enumerate_devices, stoul
from intelrt_xpu.affinity import HIERARCHIES, read_mask

FOUR_TILES = Product("spec example GPU", 4, 1.0, "COMPOSITE")


def _seen(mask: str | None, mode: str, cards: int = 2, product: Product = FOUR_TILES) -> list[tuple[int, tuple[int, ...]]]:
    return [(d.card, d.tiles) for d in enumerate_devices(cards, product, mode, mask)]


@pytest.mark.claim("X2")
@pytest.mark.parametrize(("mask", "devices"), [
    ("0, 1", [(0, (0, 1, 2, 3)), (1, (0, 1, 2, 3))]),
    ("0", [(0, (0, 1, 2, 3))]),
    ("1", [(1, (0, 1, 2, 3))]),
    ("0.0", [(0, (0,))]),
    ("1.1, 1.2", [(1, (1, 2))]),
    ("0.2, 1.3, 1.0, 0.3", [(0, (2, 3)), (1, (0, 3))]),  # "the order is unchanged"
])
def test_X2_composite_examples_of_the_level_zero_spec(mask: str, devices: list[tuple[int, tuple[int, ...]]]) -> None:
    assert _seen(mask, "COMPOSITE") == devices


@pytest.mark.claim("X2")
@pytest.mark.parametrize("mode", ["FLAT", "COMBINED"])
@pytest.mark.parametrize(("mask", "tiles"), [
    ("0, 1, 2, 3, 4, 5, 6, 7", [(0, (0,)), (0, (1,)), (0, (2,)), (0, (3,)), (1, (0,)), (1, (1,)), (1, (2,)), (1, (3,))]),
    ("0", [(0, (0,))]),
    ("1", [(0, (1,))]),
    ("0, 4", [(0, (0,)), (1, (0,))]),
    ("1, 2, 7", [(0, (1,)), (0, (2,)), (1, (3,))]),
    ("0.0", []),  # "is not valid" in FLAT: the driver skips it
])
def test_X2_flat_examples_of_the_level_zero_spec(mode: str, mask: str, tiles: list[tuple[int, tuple[int, ...]]]) -> None:
    assert _seen(mask, mode) == tiles


@pytest.mark.claim("X2")
@pytest.mark.parametrize(("mask", "count"), [("3", 1), ("4", 0)])
def test_X2_compute_runtimes_own_mask_cases(mask: str, count: int) -> None:
    """One root device with four sub-devices: "3" maps a sub-device, "4" maps none
    (givenCorrect/IncorrectZeAffinityMaskWithFlatOrCombinedHierarchy...)."""
    for mode in ("FLAT", "COMBINED"):
        assert len(_seen(mask, mode, cards=1)) == count


@pytest.mark.claim("X2")
def test_X2_the_driver_reads_entries_with_stoul_and_fails_on_what_it_cannot_read() -> None:
    assert [stoul(text) for text in ("7", " 7", "010", "0x1f", "3abc", "+2")] == [7, 7, 8, 31, 3, 2]
    assert stoul("-1") == 2**32 - 1  # wraps, then no device has that id
    for unreadable in ("", "abc", "²", "."):
        with pytest.raises(DriverInitError):
            stoul(unreadable)
    max1550 = PRODUCTS["max1550"]
    assert len(enumerate_devices(2, max1550, None, None)) == 4  # FLAT is the Max series' default
    assert len(enumerate_devices(2, max1550, "Flat", None)) == 4  # not exactly "FLAT": the default again
    assert len(enumerate_devices(2, max1550, "", "")) == 4  # an empty mask selects every device
    with pytest.raises(DriverInitError):
        enumerate_devices(2, max1550, None, "0,,1")


masks = st.lists(st.one_of(st.integers(0, 9).map(str), st.sampled_from(["", "-1", "01", "0x1", "1a", "x", "1.0",
                                                                          "0.1", "2.3", " 1", "1.1.1"])),
                 min_size=1, max_size=5).map(",".join)


@settings(max_examples=300, deadline=None)
@given(masks, st.sampled_from(HIERARCHIES), st.integers(1, 3), st.integers(1, 2))
def test_X2_intelrt_reads_a_mask_as_the_simulated_driver_does(mask: str, mode: str, cards: int, tiles: int) -> None:
    """For any mask, hierarchy and machine: intelrt predicts a driver failure exactly when the
    driver fails, and otherwise the devices it names are the ones the driver shows — except a
    COMPOSITE card.tile entry for a tile the card lacks, which a process cannot check (it sees
    cards, not their tiles): the driver drops it, intelrt keeps the card."""
    product = Product("GPU", tiles, 1.0, mode)
    reading = read_mask(mask, mode)
    try:
        devices = enumerate_devices(cards, product, mode, mask)
    except DriverInitError:
        assert reading.fatal, f"intelrt missed why the driver fails on {mask!r}"
        return
    assert not reading.fatal, f"intelrt predicts a failure the driver does not have: {reading.fatal}"
    if mode == "COMPOSITE":
        ids = sorted({d.card for d in devices})
        tile_parts = [entry.split(".")[1] for entry in mask.split(",") if entry.count(".") == 1]
        if all(int(part) < tiles for part in tile_parts):
            assert reading.visible(cards) == ids
        else:
            assert set(ids) <= set(reading.visible(cards))
    else:
        flat = [(card, tile) for card in range(cards) for tile in range(tiles)]
        assert reading.visible(len(flat)) == [flat.index((d.card, d.tiles[0])) for d in devices]
