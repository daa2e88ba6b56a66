"""KVBatch appends decode columns in place, grows its room, and re-packs on join and leave."""

import torch

from uni_agent_core.inference.kv_batch import ROOM, KVBatch


def _row(n: int, fill: float) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.full((1, 2, n, 4), fill), torch.full((1, 2, n, 4), -fill)) for _ in range(3)]


def _append(batch: KVBatch, value: float) -> None:
    cache = batch.cache()
    for layer in cache.layers:
        layer.update(
            torch.full((batch.size, 2, 1, 4), value), torch.full((batch.size, 2, 1, 4), value)
        )
    batch.advance()


def test_decode_columns_are_written_in_place_past_the_room() -> None:
    batch = KVBatch()
    batch.add([_row(3, 1.0), _row(5, 2.0)])
    assert batch.width == 5 and batch.lengths == [3, 5]
    for step in range(ROOM + 10):  # more columns than one re-pack leaves room for
        _append(batch, 100.0 + step)
    keys, _ = batch.layers[0]
    assert keys.shape == (2, 2, 5 + ROOM + 10, 4)
    assert batch.lengths == [3 + ROOM + 10, 5 + ROOM + 10]
    assert torch.all(keys[0, :, 2:5] == 1.0) and torch.all(keys[0, :, :2] == 0.0)
    assert torch.all(keys[1, :, :5] == 2.0)
    assert torch.all(keys[:, :, 5 + ROOM + 9] == 100.0 + ROOM + 9)
    mask = batch.attention_mask(extra=1)
    assert mask[0].tolist() == [0, 0] + [1] * (3 + ROOM + 10 + 1)


def test_leaving_rows_trims_padding_and_rows_copy_real_positions() -> None:
    batch = KVBatch()
    batch.add([_row(2, 1.0), _row(6, 2.0)])
    _append(batch, 9.0)
    row = batch.row(0)
    assert row[0][0].shape == (1, 2, 3, 4) and row[0][0][0, :, -1].eq(9.0).all()
    batch.keep([0])
    assert batch.width == 3 and batch.lengths == [3]
    assert torch.equal(batch.layers[0][0], row[0][0])
    batch.keep([])
    assert batch.size == 0 and batch.layers == []
