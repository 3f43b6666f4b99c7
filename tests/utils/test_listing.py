import pytest

from xmr.utils.listing import counted, first_few, repeated


@pytest.mark.parametrize(('items', 'shown', 'line'), [
    ([], 3, ''),
    (["b", "a"], 3, "a, b"),
    (["c", "b", "a"], 3, "a, b, c"),
    (["e", "d", "c", "b", "a"], 3, "a, b, c and 2 more"),
    (['x', 'y'], 1, 'x and 1 more'),
    (['x', 'y'], 0, '2 items'),
])
def test_first_few_names_the_first_in_sorted_order_and_counts_the_rest(items, shown, line):
    assert first_few(iter(items), shown) == line


@pytest.mark.parametrize(('count', 'line'), [
    (0, '0 files'), (1, '1 file'), (2, '2 files'), (0.5, '0.5 files'), (1.0, '1.0 file')])
def test_counted_is_plural_unless_one(count, line):
    assert counted(count, 'file') == line


@pytest.mark.parametrize(('items', 'twice'), [
    ([], []), ([1, 5, 10], []), ([10, 1, 10, 5, 1, 10], [1, 10]), (('i2t', 't2i', 'i2t'), ['i2t'])])
def test_repeated_names_each_item_given_more_than_once_once_sorted(items, twice):
    assert repeated(iter(items)) == twice
