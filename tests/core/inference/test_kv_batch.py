"""KVBatch appends decode columns in place, and rows join and leave without re-packing the
batch unless they must."""

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


def _real(batch: KVBatch, index: int) -> torch.Tensor:
    """Row `index`'s real key positions in layer 0, as the model sees them."""
    keys, _ = batch.layers[0]
    return keys[index, :, batch.width - batch.lengths[index] :]


def test_decode_columns_are_written_in_place_past_the_room() -> None:
    batch = KVBatch()
    batch.add([_row(3, 1.0), _row(5, 2.0)])
    assert batch.width == 5 and batch.lengths == [3, 5]
    for step in range(ROOM + 10):  # more columns than one re-pack leaves room for
        _append(batch, 100.0 + step)
    keys, _ = batch.layers[0]
    assert keys.shape == (2, 2, 5 + ROOM + 10, 4)
    assert batch.lengths == [3 + ROOM + 10, 5 + ROOM + 10]
    assert torch.all(keys[0, :, 2:5] == 1.0)
    assert torch.all(keys[1, :, :5] == 2.0)
    assert torch.all(keys[:, :, 5 + ROOM + 9] == 100.0 + ROOM + 9)
    mask = batch.attention_mask(extra=1)
    assert mask[0].tolist() == [0, 0] + [1] * (3 + ROOM + 10 + 1)
    assert batch.repacks == 2  # the first allocation, then the room ran out once


def test_leaving_rows_trims_padding_and_rows_copy_real_positions() -> None:
    batch = KVBatch()
    batch.add([_row(2, 1.0), _row(6, 2.0)])
    _append(batch, 9.0)
    row = batch.row(0)
    assert row[0][0].shape == (1, 2, 3, 4) and row[0][0][0, :, -1].eq(9.0).all()
    assert batch.remove([1]) == [0]
    assert batch.width == 3 and batch.lengths == [3]
    assert torch.equal(batch.layers[0][0], row[0][0])
    assert batch.remove([0]) == []
    assert batch.size == 0 and batch.layers == []


def test_a_leaving_row_moves_only_the_last_row_into_its_slot() -> None:
    batch = KVBatch()
    batch.add([_row(4, 1.0), _row(5, 2.0), _row(3, 3.0), _row(2, 4.0)])
    assert batch.remove([0, 2]) == [3, 1]
    assert batch.lengths == [2, 5] and batch.width == 5
    assert torch.all(_real(batch, 0) == 4.0) and torch.all(_real(batch, 1) == 2.0)
    assert batch.attention_mask().tolist() == [[0, 0, 0, 1, 1], [1, 1, 1, 1, 1]]
    assert batch.repacks == 1


def test_rows_join_in_place_while_they_fit_left_of_the_end() -> None:
    batch = KVBatch()
    batch.add([_row(10, 1.0), _row(10, 2.0), _row(1, 8.0), _row(1, 9.0)])
    batch.remove([0, 2, 3])
    batch.add([_row(4, 3.0), _row(10 + ROOM, 5.0)])  # shorter, then longer than the others
    assert batch.repacks == 1
    assert batch.lengths == [10, 4, 10 + ROOM] and batch.width == 10 + ROOM
    assert torch.all(_real(batch, 0) == 2.0)
    assert torch.all(_real(batch, 1) == 3.0)
    assert torch.all(_real(batch, 2) == 5.0)
    batch.add([_row(11 + ROOM, 6.0)])  # longer than the columns left of the end: a re-pack
    assert batch.repacks == 2
    assert batch.lengths == [10, 4, 10 + ROOM, 11 + ROOM]
    for index, fill in enumerate([2.0, 3.0, 5.0, 6.0]):
        assert torch.all(_real(batch, index) == fill)
    _append(batch, 7.0)
    assert all(torch.all(_real(batch, i)[:, -1] == 7.0) for i in range(4))
