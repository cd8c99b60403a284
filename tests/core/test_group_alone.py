"""`state.alone` makes a lone job's group as the tuple it is, without the named tuple's
constructor: it must be the very value the constructor makes, every field set, immutable."""
import pytest

from scheduler.core.state import Group, NodeSlice, alone


def test_alone_is_the_group_the_constructor_makes():
    where = (NodeSlice(2, (0, 1)),)
    made = alone(7, 2, 1.5, where)
    expected = Group((7,), 2, 1.5, where)
    assert type(made) is Group
    assert tuple(made) == tuple(expected) and made._asdict() == expected._asdict()
    assert made == expected and hash(made) == hash(expected)
    with pytest.raises(AttributeError):
        made.tt = 2.0  # type: ignore[misc]
